package retracemcp_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrace-go/retrace/clock"
	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
	"github.com/retrace-go/retrace/contrib/mcp/mcptest"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/tool"
)

var epoch = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// rig is a client under retrace whose spans a recorder keeps, on a virtual
// clock: backoffs and cool-downs pass at once.
type rig struct {
	rec    *tracetest.SpanRecorder
	opts   []middleware.Option
	clk    *clock.Fake
	rc     *retracemcp.Client
	client *mcp.Client
}

func newRig(t *testing.T, cfg retracemcp.Config) *rig {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r := &rig{rec: rec, opts: []middleware.Option{middleware.WithTracerProvider(tp)}, clk: clock.NewVirtual(epoch)}
	cfg.Options = append(cfg.Options, r.opts...)
	if cfg.Tool.Clock == nil {
		cfg.Tool.Clock = r.clk
	}
	r.rc = retracemcp.New(cfg)
	r.client = mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0.0"}, nil)
	r.client.AddSendingMiddleware(r.rc.Middleware())
	return r
}

// connect connects the rig's client to a fresh fault server.
func (r *rig) connect(t *testing.T, tr transport, args ...string) (*mcp.ClientSession, *child) {
	return connect(t, context.Background(), r.client, tr, r.rc.Transport, serverOpts{args: args})
}

// task runs f under a root layer, the task, and returns the spans of its
// trace.
func (r *rig) task(t *testing.T, ctx context.Context, f func(ctx context.Context)) []sdktrace.ReadOnlySpan {
	t.Helper()
	root := middleware.Layer[struct{}, struct{}]("task", middleware.Spec[struct{}]{}, r.opts...)(func(ctx context.Context, _ struct{}) (struct{}, error) {
		f(ctx)
		return struct{}{}, nil
	})
	before := len(r.rec.Ended())
	_, _ = root(ctx, struct{}{})
	spans := r.rec.Ended()[before:]
	last := spans[len(spans)-1]
	require.Equal(t, "task", last.Name())
	return ofTrace(r.rec.Ended(), last)
}

// ofTrace are the spans of root's trace.
func ofTrace(spans []sdktrace.ReadOnlySpan, root sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanContext().TraceID() == root.SpanContext().TraceID() {
			out = append(out, s)
		}
	}
	return out
}

func toolNamed(t *testing.T, tools []*tool.Tool, name string) *tool.Tool {
	t.Helper()
	for _, x := range tools {
		if x.Name() == name {
			return x
		}
	}
	t.Fatalf("the server lists no tool %q", name)
	return nil
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

func spansNamed(spans []sdktrace.ReadOnlySpan, prefix string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if strings.HasPrefix(s.Name(), prefix) {
			out = append(out, s)
		}
	}
	return out
}

// fault is one row of the fault table: what the server does, how a call
// of it through the server's governed tool must end, and what the model
// must read.
type fault struct {
	name     string
	tool     string
	args     string
	serve    []string // the server's flags
	only     transport
	class    string // the model's failure class, "" for a success
	outcome  string // the task's tool layer's retrace.outcome
	errType  string // error.type on the tool layer, "" for a success
	requests int    // tools/call requests the server received
	hint     string // a part of the hint the model reads
	// during runs while the call is under way (a hang's timeout).
	during func(t *testing.T, r *rig, c *child)
}

// advanceOnHang moves the virtual clock past the tool's timeout each time
// the server says a call hangs, n times.
func advanceOnHang(n int) func(t *testing.T, r *rig, c *child) {
	return func(t *testing.T, r *rig, c *child) {
		for i := 1; i <= n; i++ {
			_, err := c.log.wait(fmt.Sprintf("hang %d", i), func(evs []event) bool {
				hangs := 0
				for _, ev := range evs {
					if ev.Kind == "hang" {
						hangs++
					}
				}
				return hangs >= i
			})
			if err != nil {
				t.Error(err)
				return
			}
			r.clk.Advance(10 * time.Second)
		}
	}
}

var faults = []fault{
	{name: "answers", tool: "echo", args: `{"text":"runbook"}`, outcome: "success", requests: 1},
	{name: "a 70 KiB argument", tool: "echo", args: `{"text":"` + strings.Repeat("x", 70<<10) + `"}`, outcome: "success", requests: 1},
	// Over HTTP the server takes at most mcptest.MaxBody: more is its
	// refusal of the arguments (413), which smaller ones may pass, not a
	// model's context overflowing.
	{name: "an argument over the server's body limit", tool: "echo", args: `{"text":"` + strings.Repeat("x", mcptest.MaxBody) + `"}`, only: overHTTP,
		class: "permanent", outcome: "failed_permanent", errType: "request_too_large", requests: 1,
		hint: "echo cannot do this request (request_too_large)"},
	{name: "fails twice, then answers", tool: "flaky", args: `{"text":"runbook"}`, outcome: "success_after_retry", requests: 3},
	{name: "429 rate_limit_error (classified by the server)", tool: "search_docs", args: `{"query":"429"}`,
		class: "transient", outcome: "failed_exhausted", errType: "rate_limit_error", requests: 3, hint: "search_docs failed 3 times (rate_limit_error): try again later, or use another tool"},
	{name: "isError, plain text", tool: "tool_error", class: "unknown", outcome: "failed_unknown", errType: "tool_error", requests: 1,
		hint: "an error retrace does not recognise"},
	{name: "JSON-RPC -32603 internal error", tool: "internal", class: "transient", outcome: "failed_exhausted", errType: "-32603", requests: 3},
	{name: "JSON-RPC -32602 invalid params", tool: "strict", args: `{"text":5}`, class: "permanent", outcome: "failed_permanent", errType: "-32602", requests: 1,
		hint: "strict cannot do this request (-32602): calling it again with the same arguments fails the same way; change them"},
	{name: "invalid arguments, isError from the SDK's schema check", tool: "echo", args: `{"text":5}`, class: "permanent", outcome: "failed_permanent", errType: "invalid_arguments", requests: 1,
		hint: "the arguments were not valid for echo: fix them and call it again"},
	{name: "hangs past the attempt's timeout", tool: "hang", class: "transient", outcome: "failed_exhausted", errType: "attempt_timeout", requests: 3, during: advanceOnHang(3)},
	{name: "answers with what is not JSON-RPC", tool: "garbage", class: "programming", outcome: "failed_permanent", errType: "malformed_response", requests: 1,
		hint: "garbage failed with a bug (malformed_response)"},
	// The server's process exits mid-call: over stdio the pipe ends, over
	// HTTP the answer's stream is cut. Either way the session has ended,
	// and reads the same.
	{name: "the process exits", tool: "crash", class: "fatal", outcome: "failed_fatal", errType: "connection_closed", requests: 1,
		hint: "crash cannot be used for the rest of this task (connection_closed): do not call it again"},
}

// TestFaults runs each fault over stdio and over Streamable HTTP, through
// the server's tools as an agent's box holds them, and checks what the
// model read, the class, and the counts: requests the server received =
// leaf spans = retrace.calls.
func TestFaults(t *testing.T) {
	var table []string
	for _, tr := range []transport{overStdio, overHTTP} {
		for _, f := range faults {
			if f.only != "" && f.only != tr {
				continue
			}
			t.Run(string(tr)+"/"+f.name, func(t *testing.T) {
				r := newRig(t, retracemcp.Config{Tool: tool.Config{Timeout: 10 * time.Second}})
				cs, c := r.connect(t, tr, f.serve...)
				tools, err := r.rc.Attach(cs).Tools(context.Background())
				require.NoError(t, err)
				search := toolNamed(t, tools, f.tool)

				done := make(chan struct{})
				if f.during != nil {
					go func() {
						defer close(done)
						f.during(t, r, c)
					}()
				} else {
					close(done)
				}
				var res tool.Result
				spans := r.task(t, context.Background(), func(ctx context.Context) { res = search.Invoke(ctx, f.args) })
				<-done
				c.finish(cs)

				counts, err := retracetest.TraceCounts(spans)
				require.NoError(t, err)
				requests := len(c.log.requests("tools/call", f.tool))
				assert.Equal(t, f.requests, requests, "requests the server received")
				assert.Equal(t, requests, counts.LeafSpans, "leaf spans = requests the server received")
				assert.Equal(t, int64(counts.LeafSpans), counts.Calls, "retrace.calls = leaf spans")
				assert.GreaterOrEqual(t, counts.WorstCase, counts.Calls)

				layer := spansNamed(spans, "execute_tool "+f.tool)
				require.Len(t, layer, 1)
				assert.Equal(t, f.outcome, attr(layer[0], "retrace.outcome"))
				assert.Equal(t, f.errType, attr(layer[0], "error.type"))
				read := res.Content
				if f.class == "" {
					assert.Nil(t, res.Failure, res.Content)
				} else {
					require.NotNil(t, res.Failure, res.Content)
					assert.Equal(t, f.class, res.Failure.Class)
					assert.Contains(t, res.Failure.Hint, f.hint)
				}
				// Each request a CLIENT span beneath the tool's attempt,
				// with the conventions' attributes, of the same failure.
				for _, s := range spansNamed(spans, "tools/call "+f.tool) {
					assert.NotEmpty(t, attr(s, "jsonrpc.request.id"), "the request's id, whatever the size of its body")
					if attr(s, "error.type") != "" {
						assert.NotEqual(t, "failed_exhausted", attr(s, "retrace.outcome"), "a request is one attempt: it exhausted nothing")
					}
					assert.Equal(t, "tools/call", attr(s, "mcp.method.name"))
					assert.Equal(t, f.tool, attr(s, "gen_ai.tool.name"))
					assert.Equal(t, "execute_tool", attr(s, "gen_ai.operation.name"))
					assert.NotEmpty(t, attr(s, "mcp.protocol.version"))
					assert.NotEmpty(t, attr(s, "network.transport"))
					if strings.HasPrefix(f.errType, "-32") {
						assert.Equal(t, f.errType, attr(s, "rpc.response.status_code"), "the JSON-RPC error's code")
					}
				}
				table = append(table, fmt.Sprintf("| %s | %s | %s %s | %d | %d | %s |", f.name, tr, orDash(f.class), orDash(f.errType), requests, counts.LeafSpans, read))
			})
		}
	}
	sort.Strings(table)
	if os.Getenv("RETRACEMCP_TABLE") != "" {
		t.Log("\n| fault | transport | class, error.type | requests | leaf spans = retrace.calls | what the model read |\n|---|---|---|---|---|---|\n" + strings.Join(table, "\n"))
	}
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
