// Package retraceeino drops retrace into cloudwego/eino agents: an eino
// ChatModelAgent's model calls go through the same layers as a retrace
// Session's (the inference layer and the model layer of session.InferenceLayers), its tool calls,
// of every kind eino has, through retrace's tool governance
// (classification, retry with jitter and the task budget, a breaker per
// tool, a bulkhead, and the structured failure the model reads instead of
// an error), and each run is one trace whose root says how many provider
// requests and tool calls it made.
//
// [New] returns a [Middleware], an adk.ChatModelAgentMiddleware: register it
// in ChatModelAgentConfig.Handlers, and run the agent through
// [Middleware.Agent], the run's root span. Make it once and share it: each
// tool's breaker lives in it, by tool name.
//
//	mw := retraceeino.New(retraceeino.Config{Model: "gpt-4o-mini", Provider: "openai"})
//	agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
//		Name: "oncall", Model: chat, ToolsConfig: tools,
//		Handlers: []adk.ChatModelAgentMiddleware{mw},
//	})
//	runner := adk.NewRunner(ctx, adk.RunnerConfig{Agent: mw.Agent(agent)})
//
// The trace of a run: the root "invoke_agent {Name}" (runtime.AgentLayer,
// with gen_ai.agent.name), beneath it for each model call the inference
// span "chat {Model}" (CLIENT, layer session, gen_ai.request.stream as eino
// called it, the answer's usage, finish reason and ID at its end) around
// SessionRetry's attempts, each an INTERNAL model span with the attempt's
// timeout, and for each tool call an "execute_tool {tool}" span. To see
// each HTTP request as a leaf span, give the model an HTTP client whose
// transport is middleware.Transport (eino-ext's OpenAI model:
// ChatModelConfig.HTTPClient, which replaces the client that
// ChatModelConfig.Timeout would configure: set the client's Timeout too).
//
// A stream is read to its end inside each attempt, so that a stream that
// fails midway is retried rather than half delivered; the agent then gets
// the chunks at once. A model says why its answer ended in its last chunk
// (schema.ResponseMeta.FinishReason); a stream that ends without any chunk
// saying so ended early (eino-ext's OpenAI stream reader ends as cleanly at
// a connection closed before [DONE] as at [DONE]), and fails the attempt as
// a dropped stream (policies.StreamDropped), error.type stream_dropped, which is retried, as
// a stream cut by a reset connection is.
//
// eino's own ModelRetryConfig runs outside every WrapModel wrapper: each of
// its attempts runs the inference layer to its end again, so MaxRetries 2
// around SessionRetry's 4 attempts is up to 12 provider requests per model
// call. The middleware declares it ([middleware.WithinRetry]): the root
// span's nested-retry event says "eino.ModelRetry(3) × session(4)" and its
// retrace.calls.worst_case counts it before the calls happen. It also keeps
// eino from calling again what cannot succeed: the config's predicate
// (IsRetryAble, eino's default retrying every error, or ShouldRetry) is
// composed, in place and once, with retrace's classification, so that a
// quota error is one request with ModelRetryConfig on too; the user's
// predicate is still asked and keeps its no. When eino gives up, the root is
// classified by the last error it retried, so that it agrees with the spans
// beneath it. Keep one retrying layer where you can: leave ModelRetryConfig
// unset, or set Config.Retry to one attempt.
//
// A tool wrapped with eino's utils.WrapToolWithErrorHandler turns its
// errors into results before any middleware sees them; the middleware
// refuses such a tool at the run's start ([ErrSwallowedErrors]) rather than
// govern it in name only. Wrap it with [WrapToolWithErrorHandler] instead:
// the tool is governed, and its handler makes the text the model reads of
// a call's final failure.
package retraceeino
