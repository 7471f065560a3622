// Package retracetest is a local, fault-injecting server that speaks the
// OpenAI chat-completions protocol, so that tests and demos can show exactly
// how many provider calls a stack of retry layers makes.
//
// A [Server] answers POST /chat/completions and POST /v1/chat/completions on
// 127.0.0.1 only. For every request it receives it counts the request, records
// its decoded body as a [Request], and asks its [Script] which [Fault] to
// answer with. The script is given the 0-based index of the request, so a
// scenario is a plain function of the arrival order and is fully
// deterministic. [Sequence], [Always] and [FailFirst] build the common
// scripts.
//
// A fault is one of a success (streamed as server-sent events when the
// request asks for stream=true, a chat.completion object otherwise), an error
// answer ([RateLimited] with Retry-After, [ServerError], [InvalidAPIKey],
// [ContextOverflow], [InsufficientQuota], [InvalidImage], [RequestTooLarge],
// or any [Status]), an error body of any shape ([StringError], and [Fault.WithBody] for a body of your own), a
// stream that is cut by a TCP reset or ends early without its finish chunk,
// a stream that fails midway with an error event ([ErrorEvent]), a
// malformed stream, a body that is not JSON, or no answer at all.
// [HugeEvent] and [HugeError] send an event or an error body of any size,
// generated as they are sent, to show that a client's limits hold;
// [Server.Written] tells how much of them was sent before the client hung
// up. Any fault may wait before answering ([Fault.WithDelay]:
// OK().WithDelay(d) is a slow answer); waits end when the request's
// context ends, and they are multiplied by the server's time scale (see
// [Server.SetTimeScale]), while the Retry-After values a fault sends are
// always in real units.
//
//	srv := retracetest.New(retracetest.Sequence(
//		retracetest.RateLimited(2*time.Second),
//		retracetest.ServerError(503),
//		retracetest.OK(),
//	))
//	if err := srv.Start(); err != nil {
//		return err
//	}
//	defer srv.Close()
//	// point an OpenAI client at srv.URL(), then check srv.Requests()
//
// A success may answer with tool calls instead of, or after, its text (see
// [CallTools] and [Fault.WithToolCalls]), so that a script can play a
// tool-using model: it reads the request's messages, such as the content of
// the last tool message, and the names of the tools the request offers
// ([Request.Tools]), and decides whether to call a tool or to answer. Tool
// calls are streamed the way OpenAI streams them, one chunk with each call's
// ID and name followed by chunks with pieces of its arguments, and the answer
// ends with finish_reason "tool_calls".
//
//	srv := retracetest.New(func(n int, req retracetest.Request) retracetest.Fault {
//		if m := req.Messages; len(m) > 0 && m[len(m)-1].Role == "tool" {
//			return retracetest.Reply("The docs say: " + m[len(m)-1].Content)
//		}
//		return retracetest.CallTools(retracetest.ToolCall{
//			Name: "search_docs", Arguments: `{"query":"retry budget"}`})
//	})
//
// The same server speaks Anthropic's Messages API at POST /v1/messages (and
// /messages); point an Anthropic client at [Server.AnthropicURL]. Its
// requests are decoded into the same [Request], so one script serves both
// protocols: the system prompt is a leading "system" message, a tool_result
// block a "tool" message with the block's tool_use_id, a tool_use block a
// [ToolCall] of its assistant message. Answers use Anthropic's event names
// (message_start, content_block_start, text_delta and input_json_delta
// deltas, content_block_stop, message_delta with the stop reason and the
// output tokens, message_stop) and its error bodies ({"type": "error",
// "error": {"type", "message"}}). There is one catalogue of faults, each
// answered in the words of the route that serves it: [InsufficientQuota]
// is OpenAI's 429 insufficient_quota on /v1/chat/completions and
// Anthropic's 402 billing_error on /v1/messages, [InvalidAPIKey]
// authentication_error "invalid x-api-key", [ContextOverflow] "prompt is
// too long: N tokens > M maximum", [RateLimited] rate_limit_error,
// ServerError(529) overloaded_error and ServerError(500) api_error, each
// with Anthropic's message. [Status] and [ErrorEvent] bring their own words,
// and the Messages route answers them with the Anthropic type of their code
// or type (Status(403, "", "permission_error", m) is Anthropic's
// permission_error). [StreamEOF] ends the stream without message_stop, and
// an error event is Anthropic's "event: error".
//
// The span helpers check what a trace says of itself against what the server
// saw: [TraceCounts] reads a trace's leaf spans and its root's retrace.calls,
// worst case, outcome and diagnosis off the spans a recorder holds
// (go.opentelemetry.io/otel/sdk/trace/tracetest), [ByTrace] splits them by
// trace, and [Server.CheckCounts] fails unless requests received = leaf
// spans = retrace.calls ≤ worst case:
//
//	rec := tracetest.NewSpanRecorder()
//	// … build the agent with middleware.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))) and run one call …
//	if err := srv.CheckCounts(rec.Ended()); err != nil {
//		t.Fatal(err)
//	}
//
// The command `retrace faultserver` (cmd/retrace) runs the same server from the command line.
package retracetest
