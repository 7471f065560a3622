package retraceeino_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cloudwego/eino/adk"
	einotool "github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	goopenai "github.com/meguminnnnnnnnn/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/tool"

	retraceeino "github.com/retrace-go/retrace/contrib/eino"
)

// toolResults are the tool messages a request sends the model, in order.
func toolResults(req retracetest.Request) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role == "tool" {
			out = append(out, m.Content)
		}
	}
	return out
}

// callsTool plays a model that calls name until it has read n results,
// then answers with the last.
func callsTool(name string, n int) retracetest.Script {
	return func(_ int, req retracetest.Request) retracetest.Fault {
		results := toolResults(req)
		if len(results) < n {
			return retracetest.CallTools(retracetest.ToolCall{Name: name, Arguments: `{"query":"payment API 429"}`})
		}
		return retracetest.Reply("From " + name + ": " + results[len(results)-1])
	}
}

// toolOutcomes are the outcomes of the tool layer's spans for name, in the
// order they ended, each of which must have failed or succeeded as it says.
func toolOutcomes(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) []string {
	t.Helper()
	var out []string
	for _, s := range layerSpans(spans, "tool") {
		if str(s, semconv.GenAIToolNameKey) != name {
			continue
		}
		o := str(s, telemetry.Outcome)
		out = append(out, o)
		failed := o != string(telemetry.OutcomeSuccess) && o != string(telemetry.OutcomeSuccessAfterRetry)
		assert.Equal(t, failed, s.Status().Code == codes.Error, "%s ended %s", s.Name(), o)
	}
	return out
}

// A tool wrapped with retraceeino.WrapToolWithErrorHandler is governed:
// each failure reaches retrace (3 attempts, then 2 and the breaker opens,
// then refused), the spans say the calls failed, and the handler makes the
// text the model reads of each final failure, seeing through it to the
// tool's own error.
func TestErrorHandlerToolIsGoverned(t *testing.T) {
	r := newRig(t, callsTool("search_docs", 3))
	var mu sync.Mutex
	var handled []error
	docs := retraceeino.WrapToolWithErrorHandler(r.docsTool(t), func(_ context.Context, err error) string {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, err)
		return "search_docs failed: " + err.Error()
	})
	events := r.run(t, context.Background(), agentOptions{tools: []einotool.BaseTool{docs}})
	require.NoError(t, lastErr(events))
	mu.Lock()
	defer mu.Unlock()

	assert.EqualValues(t, 5, r.docs.calls.Load(), "3 attempts, then 2 and the breaker opens, then none")
	require.Len(t, handled, 3, "the handler makes the text of each call's final failure")
	var fe *policies.Error
	require.ErrorAs(t, handled[0], &fe)
	assert.Equal(t, telemetry.OutcomeFailedExhausted, fe.Outcome)
	var api *policies.Error
	require.ErrorAs(t, handled[0], &api, "the tool's own error, through retrace's")
	assert.Equal(t, 429, api.StatusCode)
	assert.ErrorIs(t, handled[2], circuitbreaker.ErrOpen)

	received := r.srv.Received()
	results := toolResults(received[len(received)-1])
	require.Len(t, results, 3)
	for _, res := range results {
		assert.True(t, strings.HasPrefix(res, "search_docs failed: "), "the handler's text: %s", res)
	}
	assert.Equal(t, []string{"failed_exhausted", "rejected", "rejected"}, toolOutcomes(t, r.rec.Ended(), "search_docs"))
	requests := r.srv.Requests() + int(r.docs.calls.Load())
	assert.Equal(t, requests, leafSpans(r.rec.Ended()))
	assert.EqualValues(t, requests, num(r.root(t), telemetry.Calls))
}

// A tool wrapped with eino's utils.WrapToolWithErrorHandler cannot be
// governed (its errors never leave it): the run is refused at its start,
// naming the tool, before any request, rather than traced as a success.
func TestEinoErrorHandlerIsRefused(t *testing.T) {
	handler := func(context.Context, error) string { return "failed" }
	for name, wrap := range map[string]func(einotool.InvokableTool) einotool.BaseTool{
		"WrapToolWithErrorHandler": func(t einotool.InvokableTool) einotool.BaseTool { return utils.WrapToolWithErrorHandler(t, handler) },
		"WrapInvokableToolWithErrorHandler": func(t einotool.InvokableTool) einotool.BaseTool {
			return utils.WrapInvokableToolWithErrorHandler(t, handler)
		},
		"inside retrace's wrapper": func(t einotool.InvokableTool) einotool.BaseTool {
			return retraceeino.WrapToolWithErrorHandler(utils.WrapToolWithErrorHandler(t, handler), handler)
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, callsTool("search_docs", 1))
			events := r.run(t, context.Background(), agentOptions{tools: []einotool.BaseTool{wrap(r.docsTool(t))}})
			err := lastErr(events)
			require.ErrorIs(t, err, retraceeino.ErrSwallowedErrors)
			assert.Contains(t, err.Error(), `tool "search_docs"`)
			assert.Equal(t, 0, r.srv.Requests())
			assert.EqualValues(t, 0, r.docs.calls.Load())
			root := r.root(t)
			assert.Equal(t, codes.Error, root.Status().Code)
			assert.Equal(t, "programming", str(root, telemetry.ErrorClass))
		})
	}
}

// Outside the middleware, retrace's WrapToolWithErrorHandler is eino's: the
// tool keeps its kinds, an error becomes the handler's text, and an eino
// interrupt passes.
func TestErrorHandlerOutsideTheMiddleware(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	h := func(_ context.Context, err error) string { return "handled: " + err.Error() }

	inv := retraceeino.WrapToolWithErrorHandler(&streamTool{name: "both", fail: boom}, h)
	it, ok := inv.(einotool.InvokableTool)
	require.True(t, ok, "an invokable and streamable tool stays both")
	_, ok = inv.(einotool.StreamableTool)
	require.True(t, ok)
	out, err := it.InvokableRun(ctx, `{}`)
	require.NoError(t, err)
	assert.Equal(t, "handled: boom", out)

	st := retraceeino.WrapToolWithErrorHandler(streamOnly{&streamTool{name: "stream", fail: boom}}, h)
	_, isInv := st.(einotool.InvokableTool)
	assert.False(t, isInv, "a streamable tool stays streamable only")
	sr, err := st.(einotool.StreamableTool).StreamableRun(ctx, `{}`)
	require.NoError(t, err)
	chunks, err := readAll(sr)
	require.NoError(t, err)
	assert.Equal(t, []string{"handled: boom"}, chunks)

	interrupt := compose.Interrupt(ctx, "need approval")
	it = retraceeino.WrapToolWithErrorHandler(&streamTool{name: "approve", fail: interrupt}, h).(einotool.InvokableTool)
	_, err = it.InvokableRun(ctx, `{}`)
	assert.ErrorIs(t, err, interrupt)

	var neither einotool.BaseTool = infoOnly{}
	assert.Equal(t, neither, retraceeino.WrapToolWithErrorHandler(neither, h))
}

// A streamable tool is governed as an invokable one: each attempt reads the
// stream to its end, so that a stream that breaks midway is retried and the
// model reads the whole of the stream that succeeded, never a mix.
func TestStreamableToolIsGoverned(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(map[bool]string{false: "generate", true: "stream"}[streaming], func(t *testing.T) {
			r := newRig(t, callsTool("stream_docs", 1))
			st := &streamTool{name: "stream_docs", breakFirst: 1, chunks: []string{"runbook: ", "back off"}}
			events := r.run(t, context.Background(), agentOptions{streaming: streaming, tools: []einotool.BaseTool{streamOnly{st}}})
			require.NoError(t, lastErr(events))
			assert.EqualValues(t, 2, st.calls.Load(), "the broken stream was retried")
			assert.Equal(t, "From stream_docs: runbook: back off", answer(t, events))
			assert.Equal(t, []string{"success_after_retry"}, toolOutcomes(t, r.rec.Ended(), "stream_docs"))
			requests := r.srv.Requests() + int(st.calls.Load())
			assert.Equal(t, requests, leafSpans(r.rec.Ended()))
		})
	}
}

// Every kind of tool call eino offers a middleware is governed: retried,
// and, when it fails for good, answered with retrace's structured failure
// in the kind's own result.
func TestEveryToolKindIsGoverned(t *testing.T) {
	ctx := context.Background()
	transient := &policies.Error{Class: policies.Transient, Type: "unavailable", Err: errors.New("downstream unavailable")}
	failure := func(t *testing.T, text string) tool.Failure {
		t.Helper()
		var res struct {
			Error *tool.Failure `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(text), &res), text)
		require.NotNil(t, res.Error, text)
		return *res.Error
	}

	t.Run("invokable", func(t *testing.T) {
		r := newRig(t, retracetest.Always(retracetest.OK()))
		var calls atomic.Int64
		wrapped, err := r.mw.WrapInvokableToolCall(ctx, func(context.Context, string, ...einotool.Option) (string, error) {
			calls.Add(1)
			return "", transient
		}, &adk.ToolContext{Name: "lookup", CallID: "call-1"})
		require.NoError(t, err)
		out, err := wrapped(ctx, `{}`)
		require.NoError(t, err, "a failure is the model's to read, not the run's end")
		assert.EqualValues(t, 3, calls.Load())
		assert.Equal(t, "transient", failure(t, out).Class)
		spans := layerSpans(r.rec.Ended(), "tool")
		require.Len(t, spans, 1)
		assert.Equal(t, "call-1", str(spans[0], semconv.GenAIToolCallIDKey))
	})
	t.Run("streamable", func(t *testing.T) {
		r := newRig(t, retracetest.Always(retracetest.OK()))
		st := &streamTool{name: "tail", fail: transient}
		wrapped, err := r.mw.WrapStreamableToolCall(ctx, st.StreamableRun, &adk.ToolContext{Name: "tail"})
		require.NoError(t, err)
		sr, err := wrapped(ctx, `{}`)
		require.NoError(t, err)
		chunks, err := readAll(sr)
		require.NoError(t, err)
		require.Len(t, chunks, 1, "the failure, as one chunk")
		assert.Equal(t, "transient", failure(t, chunks[0]).Class)
		assert.EqualValues(t, 3, st.calls.Load())
		assert.Equal(t, []string{"failed_exhausted"}, toolOutcomes(t, r.rec.Ended(), "tail"))
	})
	t.Run("enhanced invokable", func(t *testing.T) {
		r := newRig(t, retracetest.Always(retracetest.OK()))
		var calls atomic.Int64
		var args []string
		wrapped, err := r.mw.WrapEnhancedInvokableToolCall(ctx, func(_ context.Context, a *schema.ToolArgument, _ ...einotool.Option) (*schema.ToolResult, error) {
			args = append(args, a.Text)
			if calls.Add(1) < 3 {
				return nil, transient
			}
			return textParts("rendered"), nil
		}, &adk.ToolContext{Name: "render"})
		require.NoError(t, err)
		res, err := wrapped(ctx, &schema.ToolArgument{Text: `{"page":1}`})
		require.NoError(t, err)
		assert.Equal(t, textParts("rendered"), res)
		assert.Equal(t, []string{`{"page":1}`, `{"page":1}`, `{"page":1}`}, args)
		assert.Equal(t, []string{"success_after_retry"}, toolOutcomes(t, r.rec.Ended(), "render"))
	})
	t.Run("enhanced invokable fails", func(t *testing.T) {
		r := newRig(t, retracetest.Always(retracetest.OK()))
		wrapped, err := r.mw.WrapEnhancedInvokableToolCall(ctx, func(context.Context, *schema.ToolArgument, ...einotool.Option) (*schema.ToolResult, error) {
			return nil, &policies.Error{Class: policies.Permanent, Type: "bad_page", Err: errors.New("no such page")}
		}, &adk.ToolContext{Name: "render"})
		require.NoError(t, err)
		res, err := wrapped(ctx, &schema.ToolArgument{Text: `{}`})
		require.NoError(t, err)
		require.Len(t, res.Parts, 1)
		assert.Equal(t, schema.ToolPartTypeText, res.Parts[0].Type)
		assert.Equal(t, "permanent", failure(t, res.Parts[0].Text).Class)
		assert.Equal(t, []string{"failed_permanent"}, toolOutcomes(t, r.rec.Ended(), "render"))
	})
	t.Run("enhanced streamable", func(t *testing.T) {
		r := newRig(t, retracetest.Always(retracetest.OK()))
		var calls atomic.Int64
		wrapped, err := r.mw.WrapEnhancedStreamableToolCall(ctx, func(context.Context, *schema.ToolArgument, ...einotool.Option) (*schema.StreamReader[*schema.ToolResult], error) {
			if calls.Add(1) == 1 {
				return brokenStream(textParts("stale"), transient), nil
			}
			return schema.StreamReaderFromArray([]*schema.ToolResult{textParts("a"), textParts("b")}), nil
		}, &adk.ToolContext{Name: "frames"})
		require.NoError(t, err)
		sr, err := wrapped(ctx, &schema.ToolArgument{Text: `{}`})
		require.NoError(t, err)
		chunks, err := readAll(sr)
		require.NoError(t, err)
		assert.Equal(t, []*schema.ToolResult{textParts("a"), textParts("b")}, chunks, "the stream that succeeded, whole")
		assert.EqualValues(t, 2, calls.Load())
		assert.Equal(t, []string{"success_after_retry"}, toolOutcomes(t, r.rec.Ended(), "frames"))
	})
}

// A tool's breaker is the Middleware's, by tool name: it outlives the run
// that opened it (each call here is a new eino endpoint, as a new run
// makes), it is shared by the kinds of call of that tool, and a tool of
// another name is not refused.
func TestBreakerIsPerToolNameAndShared(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, retracetest.Always(retracetest.OK()))
	var calls atomic.Int64
	flaky := func(context.Context, string, ...einotool.Option) (string, error) {
		calls.Add(1)
		return "", &policies.Error{Class: policies.Transient, Type: "unavailable", Err: errors.New("unavailable")}
	}
	var perCall []int64
	for range 3 {
		before := calls.Load()
		wrapped, err := r.mw.WrapInvokableToolCall(ctx, flaky, &adk.ToolContext{Name: "flaky"})
		require.NoError(t, err)
		_, err = wrapped(ctx, `{}`)
		require.NoError(t, err)
		perCall = append(perCall, calls.Load()-before)
	}
	assert.Equal(t, []int64{3, 2, 0}, perCall, "3 attempts, then 2 and the breaker opens, then refused")

	st := &streamTool{name: "flaky", chunks: []string{"ok"}}
	wrapped, err := r.mw.WrapStreamableToolCall(ctx, st.StreamableRun, &adk.ToolContext{Name: "flaky"})
	require.NoError(t, err)
	sr, err := wrapped(ctx, `{}`)
	require.NoError(t, err)
	chunks, err := readAll(sr)
	require.NoError(t, err)
	assert.Contains(t, chunks[0], "circuit open", "the streamable call of the same tool is refused too")
	assert.EqualValues(t, 0, st.calls.Load())

	steady, err := r.mw.WrapInvokableToolCall(ctx, func(context.Context, string, ...einotool.Option) (string, error) {
		return "fine", nil
	}, &adk.ToolContext{Name: "steady"})
	require.NoError(t, err)
	out, err := steady(ctx, `{}`)
	require.NoError(t, err)
	assert.Equal(t, "fine", out)
}

// The default rules classify eino-ext's errors by their shape: what
// carries a provider's answer is read as one, without a rule of eino's.
func TestGoOpenAIErrorsReadByShape(t *testing.T) {
	quota := fmt.Errorf("failed to create chat completion: %w", &goopenai.APIError{
		HTTPStatusCode: 429, Code: "insufficient_quota", Type: "insufficient_quota", Message: "You exceeded your current quota."})
	unavailable := &goopenai.RequestError{HTTPStatusCode: 503, HTTPStatus: "503 Service Unavailable", Err: errors.New("unavailable")}
	for _, tc := range []struct {
		err   error
		class policies.Class
	}{{quota, policies.Fatal}, {unavailable, policies.Transient}} {
		_, ok := policies.AsAnswer(tc.err)
		require.True(t, ok, "%v", tc.err)
		assert.Equal(t, tc.class, policies.Classify(tc.err).Class)
	}
	_, ok := policies.AsAnswer(errors.New("no answer"))
	assert.False(t, ok)
}

// streamTool is an invokable and streamable tool: it fails with fail, or
// its first breakFirst streams break after a chunk, or it streams chunks.
type streamTool struct {
	name       string
	fail       error
	breakFirst int64
	chunks     []string
	calls      atomic.Int64
}

func (s *streamTool) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: s.name, Desc: "streams the runbook"}, nil
}

func (s *streamTool) StreamableRun(context.Context, string, ...einotool.Option) (*schema.StreamReader[string], error) {
	n := s.calls.Add(1)
	switch {
	case s.fail != nil:
		return nil, s.fail
	case n <= s.breakFirst:
		return brokenStream("stale ", &policies.Error{Class: policies.Transient, Type: "stream_broke", Err: errors.New("connection reset")}), nil
	}
	return schema.StreamReaderFromArray(s.chunks), nil
}

func (s *streamTool) InvokableRun(ctx context.Context, args string, opts ...einotool.Option) (string, error) {
	sr, err := s.StreamableRun(ctx, args, opts...)
	if err != nil {
		return "", err
	}
	chunks, err := readAll(sr)
	return strings.Join(chunks, ""), err
}

// streamOnly is a streamTool that is streamable only.
type streamOnly struct{ st *streamTool }

func (s streamOnly) Info(ctx context.Context) (*schema.ToolInfo, error) { return s.st.Info(ctx) }

func (s streamOnly) StreamableRun(ctx context.Context, args string, opts ...einotool.Option) (*schema.StreamReader[string], error) {
	return s.st.StreamableRun(ctx, args, opts...)
}

// infoOnly is a tool that can be neither invoked nor streamed.
type infoOnly struct{}

func (infoOnly) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: "info"}, nil
}

// brokenStream sends first, then fails with err.
func brokenStream[T any](first T, err error) *schema.StreamReader[T] {
	sr, sw := schema.Pipe[T](2)
	sw.Send(first, nil)
	var zero T
	sw.Send(zero, err)
	sw.Close()
	return sr
}

func readAll[T any](sr *schema.StreamReader[T]) ([]T, error) {
	defer sr.Close()
	var out []T
	for {
		c, err := sr.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, c)
	}
}

func textParts(text string) *schema.ToolResult {
	return &schema.ToolResult{Parts: []schema.ToolOutputPart{{Type: schema.ToolPartTypeText, Text: text}}}
}
