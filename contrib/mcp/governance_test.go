package retracemcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/tool"
)

// A crashed stdio server is reported: Fatal, the model told not to call
// the tool again, and the session is not restarted; a later call fails at
// once, sending nothing.
func TestCrashIsReportedNotRestarted(t *testing.T) {
	r := newRig(t, retracemcp.Config{})
	cs, c := r.connect(t, overStdio)
	srv := r.rc.Attach(cs)
	tools, err := srv.Tools(context.Background())
	require.NoError(t, err)

	var res tool.Result
	spans := r.task(t, context.Background(), func(ctx context.Context) { res = toolNamed(t, tools, "crash").Invoke(ctx, `{}`) })
	require.NotNil(t, res.Failure)
	assert.Equal(t, "fatal", res.Failure.Class)
	assert.False(t, res.Failure.Retryable)
	assert.Contains(t, res.Failure.Message, "the MCP session has ended")
	counts, err := retracetest.TraceCounts(spans)
	require.NoError(t, err)
	assert.Equal(t, 1, counts.LeafSpans)

	// The next call, of another tool of that server.
	spans = r.task(t, context.Background(), func(ctx context.Context) { res = toolNamed(t, tools, "echo").Invoke(ctx, `{"text":"x"}`) })
	require.NotNil(t, res.Failure)
	assert.Equal(t, "fatal", res.Failure.Class)
	assert.Contains(t, res.Failure.Hint, "echo cannot be used for the rest of this task (connection_closed)")
	assert.Empty(t, spansNamed(spans, "tools/call"), "nothing was sent")
	counts, err = retracetest.TraceCounts(spans)
	require.NoError(t, err)
	assert.Zero(t, counts.Calls, "a call that sent nothing is not counted")
	assert.Zero(t, counts.LeafSpans)
	attempts := spansNamed(spans, "tool attempt")
	require.Len(t, attempts, 1)
	assert.Equal(t, "unsent", attr(attempts[0], "retrace.uncounted"))
	assert.Equal(t, int64(1), rootInt(spans, "retrace.calls.uncounted"))
	assert.Equal(t, 0, srv.Restarts())

	c.finish(cs)
	assert.Len(t, c.log.requests("tools/call", "crash"), 1)
	assert.Empty(t, c.log.requests("tools/call", "echo"), "the dead server received nothing")
	assert.Len(t, c.log.requests("server/discover", ""), 1, "one process, never started again")
}

// With a restart asked for, the call that found the session ended is
// retried on a new session, started by the user's function.
func TestCrashRestartedWhenAskedFor(t *testing.T) {
	r := newRig(t, retracemcp.Config{})
	log := newServerLog()
	marker := filepath.Join(t.TempDir(), "crashed")
	var cmds []*exec.Cmd
	start := func(ctx context.Context) (*mcp.ClientSession, error) {
		cmd, _ := serverCommand(t, serverOpts{args: []string{"-crash-once", marker}, log: log})
		cmds = append(cmds, cmd)
		return r.client.Connect(ctx, r.rc.Transport(&mcp.CommandTransport{Command: cmd}), nil)
	}
	srv, err := r.rc.Start(context.Background(), start)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	tools, err := srv.Tools(context.Background())
	require.NoError(t, err)
	before := len(log.requests("tools/call", ""))
	discovers := len(log.requests("server/discover", "")) + len(log.requests("initialize", ""))

	var res tool.Result
	spans := r.task(t, context.Background(), func(ctx context.Context) { res = toolNamed(t, tools, "crash").Invoke(ctx, `{}`) })
	require.Nil(t, res.Failure, res.Content)
	assert.Equal(t, "recovered: this server was started after the crash", res.Content)
	assert.Equal(t, 1, srv.Restarts())
	require.NoError(t, srv.Close())
	require.Len(t, cmds, 2)

	layer := spansNamed(spans, "execute_tool crash")
	require.Len(t, layer, 1)
	assert.Equal(t, "success_after_retry", attr(layer[0], "retrace.outcome"))
	// The failed attempt was the session's end, Transient: a restart may
	// cure it.
	attempts := spansNamed(spans, "tool attempt")
	require.Len(t, attempts, 2)
	assert.Equal(t, "transient", attr(attempts[0], "retrace.error.class"))
	assert.Equal(t, "connection_closed", attr(attempts[0], "error.type"))

	// The tools/call requests of the task reached one of the two
	// processes, and are the leaves retrace.calls counts; the restart's
	// handshake reached the new one, and is counted apart.
	counts, err := retracetest.TraceCounts(spans)
	require.NoError(t, err)
	calls := len(log.requests("tools/call", "")) - before
	assert.Equal(t, 2, calls, "the crashed call, the call again")
	assert.Equal(t, calls, counts.LeafSpans)
	assert.Equal(t, int64(calls), counts.Calls)
	handshakes := 0
	for _, s := range spans {
		if attr(s, "retrace.uncounted") == "handshake" {
			handshakes++
			assert.Equal(t, "success", attr(s, "retrace.outcome"), s.Name())
		}
	}
	assert.Equal(t, len(log.requests("server/discover", ""))+len(log.requests("initialize", ""))-discovers, handshakes,
		"the restart's handshake: a span per request the new process received")
	assert.Equal(t, int64(handshakes), rootInt(spans, "retrace.calls.uncounted"))
}

// A tools/call made directly on the session, outside any tool layer, is
// governed; its tool's breaker, per server and tool, is the one the box's
// tool has.
func TestDirectCallsAreGoverned(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, retracemcp.Config{})
	cs, c := r.connect(t, overStdio)

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "flaky", Arguments: map[string]any{"text": "x"}})
	require.NoError(t, err)
	assert.False(t, res.IsError)
	assert.Equal(t, "ok: x", retracemcp.Text(res))

	// The tool's own failing answers: the caller reads the last one, as
	// without retrace.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_docs", Arguments: map[string]any{"query": "429"}})
	require.NoError(t, err)
	assert.True(t, res.IsError)
	// Two more requests: the fifth failure in a row opens the breaker.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_docs", Arguments: map[string]any{"query": "429"}})
	require.NoError(t, err)
	assert.True(t, res.IsError)
	// Refused without a request.
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_docs", Arguments: map[string]any{"query": "429"}})
	require.Error(t, err)
	assert.ErrorIs(t, err, circuitbreaker.ErrOpen)
	var fe *policies.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, telemetry.OutcomeRejected, fe.Outcome)

	// The box's tool of the same server and name finds it open.
	tools, err := r.rc.Attach(cs).Tools(ctx)
	require.NoError(t, err)
	out := toolNamed(t, tools, "search_docs").Invoke(ctx, `{"query":"429"}`)
	require.NotNil(t, out.Failure)
	assert.Contains(t, out.Failure.Hint, "search_docs is unavailable, circuit open for another")

	// An unknown tool: Programming, one request.
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "nope"})
	require.Error(t, err)
	assert.Equal(t, policies.Programming, policies.Classify(err).Class)
	assert.Equal(t, "-32602", policies.Classify(err).Type)

	c.finish(cs)
	assert.Len(t, c.log.requests("tools/call", "flaky"), 3)
	assert.Len(t, c.log.requests("tools/call", "search_docs"), 5)
	assert.Len(t, c.log.requests("tools/call", "nope"), 1)
}

// A tools/call made inside a retrace tool layer is that layer's attempt:
// a Go tool that calls an MCP tool is governed once, not twice.
func TestNotGovernedTwice(t *testing.T) {
	r := newRig(t, retracemcp.Config{})
	cs, c := r.connect(t, overStdio)
	wrapper := tool.New("docs", func(ctx context.Context, a struct {
		Query string `json:"query"`
	}) (string, error) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_docs", Arguments: map[string]any{"query": a.Query}})
		if err != nil {
			return "", err
		}
		if res.IsError {
			return "", errors.New(retracemcp.Text(res))
		}
		return retracemcp.Text(res), nil
	}, tool.Config{Clock: r.clk, Options: r.opts})
	spans := r.task(t, context.Background(), func(ctx context.Context) { wrapper.Invoke(ctx, `{"query":"429"}`) })
	c.finish(cs)
	assert.Len(t, c.log.requests("tools/call", "search_docs"), 3, "the Go tool's three attempts, one request each")
	counts, err := retracetest.TraceCounts(spans)
	require.NoError(t, err)
	assert.Equal(t, 3, counts.LeafSpans)
	assert.Empty(t, spansNamed(spans, "execute_tool search_docs"), "no second tool layer")
	// The Go tool's error says nothing of itself: the request's
	// classification, beneath it, is carried up.
	layer := spansNamed(spans, "execute_tool docs")
	require.Len(t, layer, 1)
	assert.Equal(t, "rate_limit_error", attr(layer[0], "error.type"))
}

// TraceOnly traces and classifies every request, and governs none.
func TestTraceOnly(t *testing.T) {
	r := newRig(t, retracemcp.Config{TraceOnly: true})
	cs, c := r.connect(t, overStdio)
	spans := r.task(t, context.Background(), func(ctx context.Context) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_docs", Arguments: map[string]any{"query": "429"}})
		assert.NoError(t, err)
		assert.True(t, res.IsError)
	})
	c.finish(cs)
	assert.Len(t, c.log.requests("tools/call", "search_docs"), 1)
	calls := spansNamed(spans, "tools/call search_docs")
	require.Len(t, calls, 1)
	assert.Equal(t, "rate_limit_error", attr(calls[0], "error.type"))
	assert.Empty(t, spansNamed(spans, "execute_tool"))
}

// An MCP server's error text goes through retrace's redaction: the
// failure the model reads and every span of the client, with the client's
// secrets; the server's spans and what it sends, with the server's.
func TestSecretsNeverReachASpanOrTheModel(t *testing.T) {
	const secret = "tok-ZbX9q2Lk7PwR4mN8vQ"
	for _, tr := range []transport{overStdio, overHTTP} {
		t.Run(string(tr)+"/the client's", func(t *testing.T) {
			r := newRig(t, retracemcp.Config{Secrets: []string{secret}})
			cs, c := connect(t, context.Background(), r.client, tr, r.rc.Transport, serverOpts{env: []string{secretEnv + "=" + secret}})
			tools, err := r.rc.Attach(cs).Tools(context.Background())
			require.NoError(t, err)
			var res tool.Result
			spans := r.task(t, context.Background(), func(ctx context.Context) { res = toolNamed(t, tools, "leak").Invoke(ctx, `{}`) })
			c.finish(cs)
			require.NotNil(t, res.Failure)
			assert.Contains(t, res.Failure.Message, "upstream refused the request")
			assert.NotContains(t, res.Content, secret)
			require.NotEmpty(t, spans)
			for _, s := range spans {
				assert.NotContains(t, s.Status().Description, secret, s.Name())
				for _, kv := range s.Attributes() {
					assert.NotContains(t, kv.Value.String(), secret, "%s %s", s.Name(), kv.Key)
				}
				for _, e := range s.Events() {
					for _, kv := range e.Attributes {
						assert.NotContains(t, kv.Value.String(), secret, "%s %s", s.Name(), e.Name)
					}
				}
			}
		})
		t.Run(string(tr)+"/the server's", func(t *testing.T) {
			r := newRig(t, retracemcp.Config{})
			cs, c := connect(t, context.Background(), r.client, tr, r.rc.Transport,
				serverOpts{env: []string{secretEnv + "=" + secret, redactEnv + "=" + secret}})
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "leak"})
			require.NoError(t, err)
			c.finish(cs)
			assert.NotContains(t, retracemcp.Text(res), secret, "what the server sent")
			assert.Contains(t, retracemcp.Text(res), "upstream refused the request")
			raw := c.serverSpans(t)
			require.NotEmpty(t, raw)
			assert.NotContains(t, string(raw), secret, "the server's spans")
			assert.Contains(t, string(raw), "upstream refused the request")
		})
	}
}

// The client's metrics: each request's duration, with the conventions'
// attributes, and each session's once it has ended.
func TestClientMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	r := newRig(t, retracemcp.Config{MeterProvider: mp})
	cs, c := r.connect(t, overStdio)
	tools, err := r.rc.Attach(cs).Tools(context.Background())
	require.NoError(t, err)
	toolNamed(t, tools, "search_docs").Invoke(context.Background(), `{"query":"429"}`)
	c.finish(cs)
	r.rc.WaitSessions()

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	points := map[string][]metricdata.HistogramDataPoint[float64]{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				points[m.Name] = append(points[m.Name], h.DataPoints...)
			}
		}
	}
	var calls uint64
	for _, p := range points["mcp.client.operation.duration"] {
		if v, _ := p.Attributes.Value("gen_ai.tool.name"); v.AsString() != "search_docs" {
			continue
		}
		calls += p.Count
		want := map[attribute.Key]string{"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool",
			"error.type": "rate_limit_error", "network.transport": "pipe"}
		for k, w := range want {
			v, _ := p.Attributes.Value(k)
			assert.Equal(t, w, v.AsString(), k)
		}
		v, _ := p.Attributes.Value("mcp.protocol.version")
		assert.NotEmpty(t, v.AsString())
	}
	assert.Equal(t, uint64(3), calls, "the three requests")
	require.Len(t, points["mcp.client.session.duration"], 1)
	assert.Equal(t, uint64(1), points["mcp.client.session.duration"][0].Count)
	for _, p := range points["mcp.client.operation.duration"] {
		for _, kv := range p.Attributes.ToSlice() {
			assert.False(t, strings.HasPrefix(string(kv.Key), "retrace."), "the MCP metrics carry the conventions' keys")
		}
	}
}

// An agent framework's adapter governs a Definition's call itself: one
// tool layer, each attempt one request.
func TestDefinitionsForAnAdaptersGovernance(t *testing.T) {
	r := newRig(t, retracemcp.Config{})
	cs, c := r.connect(t, overStdio)
	defs, err := r.rc.Attach(cs).Definitions(context.Background())
	require.NoError(t, err)
	var search retracemcp.Definition
	for _, d := range defs {
		if d.Name == "search_docs" {
			search = d
		}
	}
	require.NotNil(t, search.Call)
	assert.Equal(t, "Search the runbooks.", search.Description)
	assert.Contains(t, search.Parameters["properties"], "query")

	adapted := tool.New(search.Name, func(ctx context.Context, args json.RawMessage) (string, error) {
		return search.Call(ctx, string(args))
	}, tool.Config{Clock: r.clk, Options: r.opts})
	var res tool.Result
	spans := r.task(t, context.Background(), func(ctx context.Context) { res = adapted.Invoke(ctx, `{"query":"429"}`) })
	c.finish(cs)
	require.NotNil(t, res.Failure)
	assert.Equal(t, "transient", res.Failure.Class)
	assert.Len(t, c.log.requests("tools/call", "search_docs"), 3)
	counts, err := retracetest.TraceCounts(spans)
	require.NoError(t, err)
	assert.Equal(t, 3, counts.LeafSpans)
	assert.Len(t, spansNamed(spans, "execute_tool search_docs"), 1, "the adapter's layer only")

	_, err = search.Call(context.Background(), `not json`)
	assert.Equal(t, "invalid_arguments", policies.Classify(err).Type)
}

// Calls at once, over both transports: each request its own span and id.
func TestConcurrentCalls(t *testing.T) {
	const n = 8 // the tools' bulkhead
	for _, tr := range []transport{overStdio, overHTTP} {
		t.Run(string(tr), func(t *testing.T) {
			r := newRig(t, retracemcp.Config{})
			cs, c := r.connect(t, tr)
			tools, err := r.rc.Attach(cs).Tools(context.Background())
			require.NoError(t, err)
			echo := toolNamed(t, tools, "echo")
			results := make([]tool.Result, n)
			spans := r.task(t, context.Background(), func(ctx context.Context) {
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() { results[i] = echo.Invoke(ctx, fmt.Sprintf(`{"text":"call %d"}`, i)) })
				}
				wg.Wait()
			})
			c.finish(cs)
			for i, res := range results {
				assert.Equal(t, fmt.Sprintf("call %d", i), res.Content)
			}
			assert.Len(t, c.log.requests("tools/call", "echo"), n)
			counts, err := retracetest.TraceCounts(spans)
			require.NoError(t, err)
			assert.Equal(t, n, counts.LeafSpans)
			assert.Equal(t, int64(n), counts.Calls)
			ids := map[string]bool{}
			for _, s := range spansNamed(spans, "tools/call echo") {
				ids[attr(s, "jsonrpc.request.id")] = true
			}
			assert.Len(t, ids, n)
		})
	}
}

// Client.Connect installs the middleware once per client, however many
// sessions it connects, and not again over one installed by hand: each
// request is one span.
func TestConnectInstallsOnce(t *testing.T) {
	r := newRig(t, retracemcp.Config{})
	r.client.AddSendingMiddleware(r.rc.Middleware()) // by hand, besides newRig's own: installed twice
	var sessions []*mcp.ClientSession
	var children []*child
	for range 2 {
		cmd, c := serverCommand(t, serverOpts{})
		cs, err := r.rc.Connect(context.Background(), r.client, &mcp.CommandTransport{Command: cmd}, nil)
		require.NoError(t, err)
		sessions, children = append(sessions, cs), append(children, c)
	}
	spans := r.task(t, context.Background(), func(ctx context.Context) {
		for _, cs := range sessions {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
			assert.NoError(t, err)
		}
	})
	for i, cs := range sessions {
		children[i].finish(cs)
		assert.Len(t, children[i].log.requests("tools/call", "echo"), 1)
	}
	assert.Len(t, spansNamed(spans, "tools/call echo"), 2, "a span per request, not one per installation")
	assert.Len(t, spansNamed(spans, "execute_tool echo"), 2)
	counts, err := retracetest.TraceCounts(spans)
	require.NoError(t, err)
	assert.Equal(t, int64(2), counts.Calls)
	for _, s := range spansNamed(spans, "tools/call echo") {
		assert.NotEmpty(t, attr(s, "jsonrpc.request.id"), "the transport Connect wrapped")
	}
}
