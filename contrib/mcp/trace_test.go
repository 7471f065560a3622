package retracemcp_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// remoteSpan is one of the server's spans, as its process wrote it.
type remoteSpan struct {
	traceID, spanID, parentID string
	name                      string
	kind                      tracepb.Span_SpanKind
	attrs                     map[string]string
	status                    string
}

func readSpans(t *testing.T, raw []byte) []remoteSpan {
	t.Helper()
	rss, err := setup.ReadOTLPJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	var out []remoteSpan
	for _, rs := range rss {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r := remoteSpan{traceID: hex.EncodeToString(s.TraceId), spanID: hex.EncodeToString(s.SpanId),
					parentID: hex.EncodeToString(s.ParentSpanId), name: s.Name, kind: s.Kind, attrs: map[string]string{}}
				for _, kv := range s.Attributes {
					r.attrs[kv.Key] = kv.Value.GetStringValue()
				}
				if s.Status != nil {
					r.status = s.Status.Message
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// TestOneTraceAcrossTheBoundary: the server's SERVER span is a child of the
// client's request span, in the client's trace, and the server's own work
// is beneath it; the client's span carries what the transport saw.
func TestOneTraceAcrossTheBoundary(t *testing.T) {
	for _, tr := range []transport{overStdio, overHTTP} {
		t.Run(string(tr), func(t *testing.T) {
			r := newRig(t, retracemcp.Config{})
			cs, c := r.connect(t, tr)
			tools, err := r.rc.Attach(cs).Tools(context.Background())
			require.NoError(t, err)
			search := toolNamed(t, tools, "search_docs")
			spans := r.task(t, context.Background(), func(ctx context.Context) { search.Invoke(ctx, `{"query":"429"}`) })
			c.finish(cs)

			counts, err := retracetest.TraceCounts(spans)
			require.NoError(t, err)
			requests := c.log.requests("tools/call", "search_docs")
			assert.Len(t, requests, 3)
			assert.Equal(t, len(requests), counts.LeafSpans)
			assert.Equal(t, int64(len(requests)), counts.Calls)

			clientSpans := spansNamed(spans, "tools/call search_docs")
			require.Len(t, clientSpans, 3)
			byID := map[string]sdktrace.ReadOnlySpan{}
			ids := map[string]bool{}
			for _, s := range clientSpans {
				assert.Equal(t, trace.SpanKindClient, s.SpanKind())
				assert.Equal(t, "mcp", attr(s, "retrace.layer"))
				assert.NotEmpty(t, attr(s, "jsonrpc.request.id"))
				assert.False(t, ids[attr(s, "jsonrpc.request.id")], "each request its own id")
				ids[attr(s, "jsonrpc.request.id")] = true
				assert.Equal(t, "rate_limit_error", attr(s, "error.type"))
				assert.Equal(t, "transient", attr(s, "retrace.error.class"))
				switch tr {
				case overStdio:
					assert.Equal(t, "pipe", attr(s, "network.transport"))
				case overHTTP:
					assert.Equal(t, "tcp", attr(s, "network.transport"))
					assert.Equal(t, "http", attr(s, "network.protocol.name"))
					assert.Equal(t, "1.1", attr(s, "network.protocol.version"))
					assert.Equal(t, "127.0.0.1", attr(s, "server.address"))
					assert.NotEmpty(t, attr(s, "server.port"))
					assert.NotEmpty(t, attr(s, "mcp.session.id"))
				}
				byID[s.SpanContext().SpanID().String()] = s
			}
			// The trace context the server received names the client's spans.
			for _, ev := range requests {
				require.NotEmpty(t, ev.Traceparent)
				assert.Contains(t, ev.Traceparent, clientSpans[0].SpanContext().TraceID().String())
			}

			remote := readSpans(t, c.serverSpans(t))
			var servers []remoteSpan
			for _, s := range remote {
				if s.name == "tools/call search_docs" {
					servers = append(servers, s)
				}
			}
			require.Len(t, servers, 3, "a SERVER span per request")
			for _, s := range servers {
				assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, s.kind)
				assert.Equal(t, clientSpans[0].SpanContext().TraceID().String(), s.traceID, "the server's span is in the client's trace")
				require.Contains(t, byID, s.parentID, "its parent is a client request span")
				assert.Equal(t, "tools/call", s.attrs["mcp.method.name"])
				assert.Equal(t, "search_docs", s.attrs["gen_ai.tool.name"])
				assert.Equal(t, "execute_tool", s.attrs["gen_ai.operation.name"])
				assert.Equal(t, "rate_limit_error", s.attrs["error.type"])
				assert.Equal(t, "429 rate_limit_error: Too Many Requests", s.status)
			}
			// The server's own work, beneath its span.
			work := 0
			for _, s := range remote {
				if s.name == "search index" {
					work++
					assert.Equal(t, servers[0].traceID, s.traceID)
					assert.Contains(t, []string{servers[0].spanID, servers[1].spanID, servers[2].spanID}, s.parentID)
				}
			}
			assert.Equal(t, 3, work)
		})
	}
}
