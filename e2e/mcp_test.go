//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mcpResult is the mcp scenario's line of the demo's -json output.
type mcpResult struct {
	demoResult
	Details struct {
		Naive    mcpSide `json:"naive"`
		Governed mcpSide `json:"governed"`
	} `json:"details"`
}

type mcpSide struct {
	ServerRequests int    `json:"server_requests"`
	ModelRequests  int    `json:"model_requests"`
	CacheCalls     int    `json:"cache_calls"`
	LeafSpans      int    `json:"leaf_spans"`
	Calls          int    `json:"calls"`
	TraceID        string `json:"trace_id"`
}

// The mcp scenario in a real Jaeger: search_docs is an MCP server in a
// process of its own, and its spans are in the agent's trace, beneath the
// agent's request spans: one trace ID, two services.
func TestMCPTraceInJaeger(t *testing.T) {
	j, agent, root := jaegerAndDemo(t)

	cmd := exec.Command(agent, "-json", "-scenario", "mcp", "-time-scale", "0.001")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:"+j.otlpPort, "OTEL_SERVICE_NAME=retrace-e2e")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "the demo failed: %s", stderr.String())
	var res mcpResult
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
	require.Len(t, res.TraceID, 32)
	gov, naive := res.Details.Governed, res.Details.Naive
	assert.Equal(t, res.TraceID, gov.TraceID)
	assert.Equal(t, 5, gov.ServerRequests, "the breaker opened after 5 requests")
	assert.Equal(t, 31, naive.ServerRequests, "the naive loop until its step limit")

	for _, run := range []struct {
		name string
		side mcpSide
	}{{"governed", gov}, {"naive", naive}} {
		t.Run(run.name, func(t *testing.T) {
			tr := j.trace(t, run.side.TraceID)
			rootSpan := tr.root()
			require.NotNil(t, rootSpan)
			assert.Equal(t, "agent", rootSpan.str("retrace.layer"))

			// The downstreams' requests = leaf spans = retrace.calls, in
			// Jaeger as in the demo's own count.
			requests := run.side.ServerRequests + run.side.ModelRequests + run.side.CacheCalls
			assert.Equal(t, requests, rootSpan.num("retrace.calls"))
			assert.Len(t, tr.leafSpans(), requests)

			services := tr.services()
			assert.Equal(t, "retrace-e2e", services[rootSpan.SpanID])
			clients := map[string]*span{}
			for _, s := range tr.spans() {
				if s.Name == "tools/call search_docs" && s.Kind == 3 {
					clients[s.SpanID] = s
					assert.Equal(t, "retrace-e2e", services[s.SpanID])
					assert.Equal(t, "mcp", s.str("retrace.layer"))
					assert.Equal(t, "tools/call", s.str("mcp.method.name"))
					assert.Equal(t, "search_docs", s.str("gen_ai.tool.name"))
					assert.Equal(t, "execute_tool", s.str("gen_ai.operation.name"))
					assert.Equal(t, "pipe", s.str("network.transport"))
					assert.NotEmpty(t, s.str("jsonrpc.request.id"))
					assert.NotEmpty(t, s.str("mcp.protocol.version"))
				}
			}
			assert.Len(t, clients, run.side.ServerRequests, "a CLIENT span per request")
			servers, work := 0, 0
			for _, s := range tr.spans() {
				switch {
				case s.Name == "tools/call search_docs" && s.Kind == 2:
					servers++
					assert.Equal(t, "retrace-mcp-docs", services[s.SpanID], "the server's own process")
					assert.Contains(t, clients, s.ParentSpanID, "the SERVER span is a child of the client's request span")
					assert.Equal(t, "rate_limit_error", s.str("error.type"))
				case s.Name == "search index":
					work++
					assert.Equal(t, "retrace-mcp-docs", services[s.SpanID])
				}
			}
			assert.Equal(t, run.side.ServerRequests, servers, "a SERVER span per request, in the client's trace")
			assert.Equal(t, run.side.ServerRequests, work, "the server's own work, in the same trace")
			t.Logf("trace %s: %d spans, %d of them the MCP server's (%d SERVER)", run.side.TraceID, len(tr.spans()), servers+work, servers)
		})
	}
}

// services maps each span's ID to its resource's service.name.
func (t *otlpTrace) services() map[string]string {
	out := map[string]string{}
	for _, rs := range t.Result.ResourceSpans {
		name := ""
		for _, kv := range rs.Resource.Attributes {
			if kv.Key == "service.name" {
				var v map[string]any
				if json.Unmarshal(kv.Value, &v) == nil {
					name, _ = v["stringValue"].(string)
				}
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				out[s.SpanID] = name
			}
		}
	}
	return out
}
