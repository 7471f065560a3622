// Package retraceeino drops retrace into cloudwego/eino agents: an eino
// ChatModelAgent's model calls go through retrace's session layer (a retry,
// SessionRetry by default, and a span per attempt), its invokable tool calls
// through retrace's tool governance (classification, retry with jitter and
// the task budget, a breaker per tool, a bulkhead, and the structured
// failure the model reads instead of an error), and each run is one trace
// whose root says how many provider requests and tool calls it made.
//
// [New] returns a [Middleware], an adk.ChatModelAgentMiddleware: register it
// in ChatModelAgentConfig.Handlers, where its WrapModel wraps the model's
// Generate and Stream, and its WrapInvokableToolCall the tool endpoint. Run
// the agent through [Middleware.Agent], the run's root span:
//
//	mw := retraceeino.New(retraceeino.Config{Model: "gpt-4o-mini"})
//	agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
//		Model: chat, ToolsConfig: tools,
//		Handlers: []adk.ChatModelAgentMiddleware{mw},
//	})
//	runner := adk.NewRunner(ctx, adk.RunnerConfig{Agent: mw.Agent(agent)})
//
// To see each HTTP request as a leaf span, give the model an HTTP client
// whose transport is middleware.Transport (eino-ext's OpenAI model:
// ChatModelConfig.HTTPClient).
//
// eino's own ModelRetryConfig runs outside every WrapModel wrapper: each of
// its attempts runs retrace's session layer to its end again, so
// MaxRetries 2 around SessionRetry's 4 attempts is up to 12 provider
// requests per model call, and its default IsRetryAble retries every error,
// a permanent one too. The middleware reads the agent's ModelRetryConfig
// and declares it ([middleware.WithinRetry]): the root span's nested-retry
// event says "eino.ModelRetry(3) × session(4)" and its
// retrace.calls.worst_case counts it before the calls happen. Keep one
// retrying layer: leave ModelRetryConfig unset, or set the session layer's
// Retry to one attempt.
//
// A stream is read to its end inside each attempt, so that a stream that
// fails midway is retried rather than half delivered; the agent then gets
// the chunks at once. Streamable and enhanced tools pass through ungoverned.
package retraceeino
