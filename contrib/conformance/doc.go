// Package conformance holds the conformance matrix of retrace: every way a
// model call is made (retrace's own OpenAI and Anthropic providers, a
// user's own openai-go and anthropic-sdk-go clients with middleware.SDK,
// eino through contrib/eino, genkit through contrib/genkit) against every
// fault of retracetest's servers, each ending the failure as retrace's own
// provider ends it. It is a module of its own because it imports every
// adapter; it has tests only.
package conformance
