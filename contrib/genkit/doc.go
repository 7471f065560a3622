// Package retracegenkit drops retrace into a firebase/genkit (Go) agent: an
// ai.Middleware whose hooks run every Generate call through retrace's layers,
// installed with ai.WithUse.
//
//	rt := retracegenkit.New(retracegenkit.Config{})
//	resp, err := genkit.Generate(ctx, g,
//		ai.WithModelName("openai/gpt-4o"),
//		ai.WithPrompt("Why is the payment API answering 429?"),
//		ai.WithTools(searchDocs, searchCache),
//		ai.WithUse(rt),
//	)
//
// Its hooks are:
//   - WrapGenerate: the tool loop is one "agent" layer (span "invoke_agent"),
//     whose root carries retrace.calls and retrace.calls.worst_case; its
//     steps are the loop's turns (ai.WithMaxTurns, genkit's default 5);
//   - WrapModel: each model call is a "session" layer retried as
//     Config.Retry says (policies.SessionRetry by default), with genkit's and
//     the provider's errors classified (an OpenAI-compatible plugin's
//     *openai.Error is read as the provider's answer: see [OpenAIRule]);
//   - WrapTool: each tool call is governed as tool.New governs one
//     (retry with jitter, a breaker per tool shared by every Generate the
//     middleware serves, a bulkhead, the task budget), and a failure the
//     chain gives up on reaches the model as the tool's output,
//     {"error": {"class", "retryable", "message", "retry_after_s", "hint"}},
//     instead of ending the whole Generate as a tool's error does in genkit.
//
// Genkit's own retries show as retrying layers. ai.WithUse lists middleware
// outermost first. genkit's Retry (plugins/middleware) listed after retrace
// runs inside retrace's model hook: each session attempt is up to
// MaxRetries+1 model calls, declared with middleware.WithInnerRetries, so
// the nested-retry event reads "session(4) × genkit.Retry(4)". Listed
// before retrace it runs around the hook and calls it once per attempt: the
// event reads "genkit.Retry(4) × session(4)" (middleware.WithinRetry). A
// Fallback listed after retrace counts as 1+len(Models) calls per attempt;
// listed before it, its other models' calls bypass retrace's model hook.
// The plugin's SDK may retry too: compat_oai leaves openai-go's default of
// 2 retries on. Put middleware.SDK in the client to see each HTTP request as
// a leaf span and the SDK named in the event ("session(4) × openai-go(3)"):
//
//	&compat_oai.OpenAICompatible{Provider: "openai", Opts: []option.RequestOption{
//		option.WithMaxRetries(0), option.WithMiddleware(middleware.SDK("openai-go", 0))}}
//
// One retrying layer is enough: keep retrace's and set the others to none,
// or the worst case multiplies (4 × 4 × 3 = 48 provider calls per model call
// with every default on).
package retracegenkit
