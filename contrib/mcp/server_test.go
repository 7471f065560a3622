package retracemcp_test

import (
	"context"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
	"github.com/retrace-go/retrace/policies"
)

// inProcess connects the rig's client to a server made with the SDK in this
// process, over its in-memory transport, with the server middleware on its
// own tracer and meter providers.
func inProcess(t *testing.T, r *rig, cfg retracemcp.ServerConfig) *mcp.ClientSession {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "1.0.0"}, nil)
	server.AddReceivingMiddleware(retracemcp.ServerMiddleware(cfg))
	mcp.AddTool(server, &mcp.Tool{Name: "search_docs", Description: "Search the runbooks."},
		func(ctx context.Context, _ *mcp.CallToolRequest, a struct {
			Query string `json:"query"`
		}) (*mcp.CallToolResult, any, error) {
			if a.Query == "storm" {
				return retracemcp.ToolError(&policies.Error{StatusCode: 503, Code: "server_error", Message: "the index is down"}), nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "runbook: " + a.Query}}}, nil, nil
		})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	cs, err := r.client.Connect(context.Background(), r.rc.Transport(ct), nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs
}

func TestServerMiddleware(t *testing.T) {
	srec := tracetest.NewSpanRecorder()
	stp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(srec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = stp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	r := newRig(t, retracemcp.Config{})
	cs := inProcess(t, r, retracemcp.ServerConfig{TracerProvider: stp, MeterProvider: mp})

	spans := r.task(t, context.Background(), func(ctx context.Context) {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_docs", Arguments: map[string]any{"query": "storm"}})
		assert.NoError(t, err)
	})
	clients := spansNamed(spans, "tools/call search_docs")
	require.Len(t, clients, 3, "ToolRetry's three attempts")
	parents := map[trace.SpanID]bool{}
	for _, s := range clients {
		parents[s.SpanContext().SpanID()] = true
	}
	var servers []sdktrace.ReadOnlySpan
	for _, s := range srec.Ended() {
		if s.Name() == "tools/call search_docs" {
			servers = append(servers, s)
		}
	}
	require.Len(t, servers, 3)
	for _, s := range servers {
		assert.Equal(t, trace.SpanKindServer, s.SpanKind())
		assert.True(t, s.Parent().IsRemote())
		assert.True(t, parents[s.Parent().SpanID()], "the parent is a client request span")
		assert.Equal(t, clients[0].SpanContext().TraceID(), s.SpanContext().TraceID())
		assert.Equal(t, "server_error", attr(s, "error.type"))
		assert.Equal(t, "pipe", attr(s, "network.transport"))
		assert.Contains(t, s.Status().Description, "the index is down")
	}

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var count uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "mcp.server.operation.duration" {
				continue
			}
			for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				if v, _ := p.Attributes.Value("gen_ai.tool.name"); v.AsString() == "search_docs" {
					count += p.Count
					et, _ := p.Attributes.Value("error.type")
					assert.Equal(t, "server_error", et.AsString())
				}
			}
		}
	}
	assert.Equal(t, uint64(3), count)
}

// A request that arrives in a trace context of the transport's own (an
// instrumented HTTP handler's) is a child of the client's span, and links
// the transport's.
func TestServerSpanLinksTheAmbientContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	client := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	ambient := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{3}, SpanID: trace.SpanID{4}, TraceFlags: trace.FlagsSampled})
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "search_docs",
		Meta: mcp.Meta{"traceparent": "00-01000000000000000000000000000000-0200000000000000-01"}}}
	h := retracemcp.ServerMiddleware(retracemcp.ServerConfig{TracerProvider: tp})(func(ctx context.Context, _ string, _ mcp.Request) (mcp.Result, error) {
		return nil, errors.New("the index is down")
	})
	_, err := h(trace.ContextWithSpanContext(context.Background(), ambient), "tools/call", req)
	require.Error(t, err)
	spans := rec.Ended()
	require.Len(t, spans, 1)
	assert.Equal(t, client.TraceID(), spans[0].SpanContext().TraceID())
	assert.Equal(t, client.SpanID(), spans[0].Parent().SpanID())
	require.Len(t, spans[0].Links(), 1)
	assert.Equal(t, ambient.SpanID(), spans[0].Links()[0].SpanContext.SpanID())
	assert.Equal(t, "the index is down", spans[0].Status().Description)
}
