// Package retracegenkit drops retrace into a firebase/genkit (Go) agent: an
// ai.Middleware whose hooks run every Generate call through retrace's layers,
// installed with ai.WithUse, and a genkit plugin that keeps the tools'
// breakers with the genkit instance.
//
//	g := genkit.Init(ctx, genkit.WithPlugins(oai, &retracegenkit.Plugin{}))
//	rt := retracegenkit.New(retracegenkit.Config{})
//	resp, err := genkit.Generate(ctx, g,
//		ai.WithModelName("openai/gpt-4o"),
//		ai.WithPrompt("Why is the payment API answering 429?"),
//		ai.WithTools(searchDocs, searchCache),
//		ai.WithUse(rt),
//	)
//
// Its hooks are:
//   - WrapGenerate: the tool loop is one agent layer (runtime.AgentLayer,
//     span "invoke_agent"), whose root carries retrace.calls and
//     retrace.calls.worst_case; its steps are the loop's turns
//     (ai.WithMaxTurns, genkit's default 5);
//   - WrapModel: each model call is the inference layer a Session makes
//     (session.InferenceLayers: the inference layer, span "chat {model}", CLIENT, with the GenAI
//     attributes, retried as Config.Retry says, policies.SessionRetry by
//     default) over a model layer per attempt (the model layer: its
//     timeout). The model and provider are Config's, else genkit's
//     "provider/model" name of the call. A streamed call's chunks reach the
//     streaming callback once the attempt that streamed them has answered,
//     so that a retried stream shows its text once, and a stream that ends
//     without a finish reason is a dropped stream (policies.StreamDropped),
//     retried, not a short answer;
//   - WrapTool: each tool call is governed as tool.New governs one
//     (retry with jitter, a breaker per tool, a bulkhead, the task budget),
//     and a failure the chain gives up on reaches the model as the tool's
//     output, {"error": {"class", "retryable", "message", "retry_after_s",
//     "hint"}}, instead of ending the whole Generate as a tool's error does in
//     genkit.
//
// Genkit calls a middleware's New once per Generate, on the very value given
// to ai.WithUse. The breakers live in the [Plugin] when the genkit instance
// has one, so a Middleware made per request shares them; without it they
// live in the Middleware, which must then be made once and shared.
//
// The errors are retrace's: the model call's final error unwraps to a
// layer's *policies.Error, inside a genkit status error (core/status) whose
// status genkit's Retry and Fallback do not act on when retrace does not
// retry the failure (FAILED_PRECONDITION for a spent quota, the provider's
// UNAUTHENTICATED or INVALID_ARGUMENT, UNKNOWN for a bug); a transient
// failure keeps the provider's status.
//
// Genkit's own retries show as retrying layers. ai.WithUse lists middleware
// outermost first. genkit's Retry (plugins/middleware) listed before retrace
// runs around the hook and calls it once per attempt: the event reads
// "genkit.Retry(4) × session(4)" (middleware.WithinRetry), and it stops on
// what retrace does not retry. Listed after retrace it runs inside retrace's
// model hook: each model attempt is up to MaxRetries+1 model calls, declared
// as the model layer's inner attempts, so the nested-retry event reads
// "session(4) × genkit.Retry(4)". There it decides on compat_oai's own
// status, before retrace sees the error, and calls again on a spent quota
// (RESOURCE_EXHAUSTED, as a rate limit is); with middleware.SDK in the
// client those calls are not sent (a resend of what cannot succeed, beneath
// a declared inner loop, is refused before it leaves), so the provider sees
// one request, but a stream it restarts sends its chunks to the callback
// again: list it before retrace's middleware, or leave it out. A Fallback listed after retrace counts as
// 1+len(Models) calls per attempt; listed before it, its other models' calls
// bypass retrace's model hook. The plugin's SDK may retry too: compat_oai
// leaves openai-go's default of 2 retries on. Put middleware.SDK in the
// client to see each HTTP request as a leaf span, the SDK named in the
// event ("session(4) × openai-go(3)"), and a stream without its terminator
// failed where it is read:
//
//	&compat_oai.OpenAICompatible{Provider: "openai", Opts: []option.RequestOption{
//		option.WithMaxRetries(0), option.WithMiddleware(middleware.SDK("openai-go", 0))}}
//
// One retrying layer is enough: keep retrace's and set the others to none,
// or the worst case multiplies (4 × 4 × 3 = 48 provider calls per model call
// with every default on).
package retracegenkit
