//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// traceCounts are what a trace in Jaeger says of one run of the demo.
type traceCounts struct {
	Spans     int      // every span of the trace
	Leaves    int      // leaf layer spans: the calls that reached the provider
	Calls     int      // the root's retrace.calls
	WorstCase int      // the root's retrace.calls.worst_case
	Shape     []string // each span's name, layer and attempt, sorted
}

// The same demo trace reaches a real Jaeger whole over OTLP/gRPC (port
// 4317's receiver) and over OTLP/HTTP (4318's), set up only through the
// OTEL_* variables a user sets: the same spans, the same counts.
func TestDemoTraceOverGRPCAndHTTP(t *testing.T) {
	j, agent, _ := jaegerAndDemo(t)

	protocols := []struct {
		name string
		env  []string
	}{
		{"grpc", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:" + j.otlpPort, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}},
		// The protocol unset: http/protobuf, the specification's default.
		{"http/protobuf", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:" + j.otlpHTTPPort}},
	}
	counts := map[string]traceCounts{}
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			cmd := exec.Command(agent, "-json", "-scenario", "always-503", "-time-scale", "0.001")
			cmd.Env = append(withoutOTel(os.Environ()), append(p.env, "OTEL_SERVICE_NAME=retrace-e2e-"+p.name)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "the demo failed: %s", stderr.String())
			assert.NotContains(t, stderr.String(), "could not flush", "the export failed")
			var res demoResult
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
			require.Len(t, res.TraceID, 32)

			tr := j.trace(t, res.TraceID)
			rootSpan := tr.root()
			require.NotNil(t, rootSpan, "the trace has no root span")
			assert.Equal(t, "retrace-e2e-"+p.name, tr.service())
			c := traceCounts{
				Spans:     len(tr.spans()),
				Leaves:    len(tr.leafSpans()),
				Calls:     rootSpan.num("retrace.calls"),
				WorstCase: rootSpan.num("retrace.calls.worst_case"),
			}
			for _, s := range tr.spans() {
				c.Shape = append(c.Shape, fmt.Sprintf("%s layer=%s attempt=%d", s.Name, s.str("retrace.layer"), s.num("retrace.attempt")))
			}
			sort.Strings(c.Shape)
			assert.Equal(t, res.ProviderRequests, c.Calls, "retrace.calls = provider requests")
			assert.Equal(t, res.ProviderRequests, c.Leaves, "leaf layer spans = provider requests")
			assert.Equal(t, 12, c.Calls)
			assert.Equal(t, 12, c.WorstCase)
			counts[p.name] = c
			t.Logf("over %s: %d spans, %d leaf spans, retrace.calls=%d, retrace.calls.worst_case=%d (trace %s)",
				p.name, c.Spans, c.Leaves, c.Calls, c.WorstCase, res.TraceID)
		})
	}
	require.Len(t, counts, 2)
	assert.Equal(t, counts["grpc"], counts["http/protobuf"], "the same trace both ways")
}

// withoutOTel is env without the OTEL_* variables, so that a test's run
// depends on none the machine has set.
func withoutOTel(env []string) []string {
	var out []string
	for _, kv := range env {
		if len(kv) < 5 || kv[:5] != "OTEL_" {
			out = append(out, kv)
		}
	}
	return out
}
