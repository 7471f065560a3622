// Package semconv holds the OpenTelemetry semantic-convention keys that
// retrace sets, taken from the conventions' own package (the release whose
// schema retrace's spans and metrics name), so that a key here is the
// convention's, letter for letter, and the README's attribute table says
// where retrace sets each. Users read them from the conventions' package
// itself; retrace's own names are in package telemetry.
package semconv

import conv "go.opentelemetry.io/otel/semconv/v1.41.0"

// OpenTelemetry semantic-convention keys retrace sets, taken from the
// conventions' own package (the release whose schema retrace's spans and
// metrics name), so that a key here is the convention's, letter for letter.
const (
	ErrorType = conv.ErrorTypeKey // failed span: the error's low-cardinality type: the provider's code, the HTTP status or the Go type

	GenAIOperation     = conv.GenAIOperationNameKey         // chat, tool and agent spans: chat, execute_tool, invoke_agent
	GenAIProvider      = conv.GenAIProviderNameKey          // chat, candidate and agent spans: openai, anthropic, …
	GenAIRequestModel  = conv.GenAIRequestModelKey          // chat and candidate spans: the model asked for
	GenAIResponseModel = conv.GenAIResponseModelKey         // chat span: the model that answered
	GenAIInputTokens   = conv.GenAIUsageInputTokensKey      // chat span: prompt tokens
	GenAIOutputTokens  = conv.GenAIUsageOutputTokensKey     // chat span: completion tokens
	GenAIFinishReasons = conv.GenAIResponseFinishReasonsKey // chat span: why the model stopped; ["error"] when the call failed
	GenAIResponseID    = conv.GenAIResponseIDKey            // chat span: the provider's ID for the completion
	GenAIRequestStream = conv.GenAIRequestStreamKey         // chat span: the answer was asked for as a stream
	// GenAITimeToFirstChunk is on the chat span: how long the answer's first
	// piece took to arrive, in seconds, in the attempt that ended the call.
	GenAITimeToFirstChunk = conv.GenAIResponseTimeToFirstChunkKey
	GenAIToolName         = conv.GenAIToolNameKey        // tool span: the tool called
	GenAIToolCallID       = conv.GenAIToolCallIDKey      // tool span: the model's ID for the call
	GenAIToolType         = conv.GenAIToolTypeKey        // tool span: function
	GenAIToolDesc         = conv.GenAIToolDescriptionKey // tool span: the tool's description, as offered to the model
	GenAIAgentName        = conv.GenAIAgentNameKey       // agent span: the agent's name, when the loop has one

	HTTPMethod     = conv.HTTPRequestMethodKey      // request span: GET, POST, …
	HTTPStatusCode = conv.HTTPResponseStatusCodeKey // request span: the response's status; MCP client span over Streamable HTTP: an error status
	URLFull        = conv.URLFullKey                // request span: the request URL, without secrets
	ServerAddress  = conv.ServerAddressKey          // request and chat spans: the host called
	ServerPort     = conv.ServerPortKey             // request and chat spans: the port called, the scheme's default included
	// HTTPResendCount is on a request span: the physical request's place
	// among the attempts of one logical request, 0 for the first, then 1,
	// 2, … for the retries (from an SDK's X-Stainless-Retry-Count, or the
	// layer's own attempts).
	HTTPResendCount = conv.HTTPRequestResendCountKey

	ServiceName = conv.ServiceNameKey // resource: the service, when the environment names none
)

// Attributes that only metrics carry.
const TokenType = conv.GenAITokenTypeKey // token usage: input or output

// The values of gen_ai.token.type.
const (
	TokenInput  = "input"
	TokenOutput = "output"
)
