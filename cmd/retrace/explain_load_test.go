package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// failedRun is a trace of the demo's shape: a runtime call that failed
// after its attempts, one leaf span each.
func failedRun(n byte, calls int) tracetest.SpanStubs {
	spans := []fake{{id: 1, name: "runtime", attrs: []attribute.KeyValue{telemetry.Layer.String("runtime"),
		telemetry.Outcome.String("failed_exhausted"), telemetry.Calls.Int(calls), telemetry.CallsWorstCase.Int(12)}}}
	for i := range calls {
		spans = append(spans, fake{id: uint64(i + 2), parent: 1, name: "runtime attempt", attrs: []attribute.KeyValue{telemetry.Attempt.Int(i + 1)}})
	}
	return traceOf(n, spans...)
}

// Past -max-bytes the input is refused, saying so and how to read it
// all, rather than read cut short: not an "unexpected EOF", and not a
// trace said to be missing that lies past the limit.
func TestExplainInputLimit(t *testing.T) {
	var first bytes.Buffer
	require.NoError(t, setup.WriteOTLPJSON(&first, failedRun(1, 3).Snapshots()))
	file := otlpFile(t, failedRun(1, 3), failedRun(2, 3))
	info, err := os.Stat(file)
	require.NoError(t, err)
	size := info.Size()
	second := "ab000000000000000000000000000002"

	cases := []struct {
		name  string
		limit int64
	}{
		{"mid-object", size / 2},
		{"at a line's end", int64(first.Len())},
		{"one byte short", size - 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr := explainRun(t, 1, "-otlp-file", file, "-trace", second, "-max-bytes", fmt.Sprint(c.limit))
			assert.Contains(t, stderr, fmt.Sprintf("%s: larger than %dB, the most explain reads (-max-bytes %dB): raise it to read this, e.g. -max-bytes %dB\n",
				file, c.limit, c.limit, 2*c.limit))
			assert.NotContains(t, stderr, "EOF")
			assert.NotContains(t, stderr, "no trace")
		})
	}
	t.Run("exactly the limit", func(t *testing.T) {
		stdout, _ := explainRun(t, 0, "-otlp-file", file, "-trace", second, "-max-bytes", fmt.Sprint(size))
		assert.Contains(t, stdout, "explain "+second)
	})
	_, stderr := explainRun(t, 1, "-otlp-file", file, "-max-bytes", "0")
	assert.Contains(t, stderr, "want a size above 0")
}

// Jaeger's answer is held to -max-bytes too, whether it says its length
// or streams; and a Jaeger that does not answer within -timeout says so.
func TestExplainJaegerLimits(t *testing.T) {
	var body bytes.Buffer
	require.NoError(t, setup.WriteOTLPJSON(&body, failedRun(1, 3).Snapshots()))
	id := "ab000000000000000000000000000001"
	mux := http.NewServeMux()
	mux.HandleFunc("/sized/api/v3/traces/"+id, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(body.Len()))
		_, _ = w.Write(body.Bytes())
	})
	mux.HandleFunc("/streamed/api/v3/traces/"+id, func(w http.ResponseWriter, _ *http.Request) {
		for line := range strings.Lines(body.String()) {
			_, _ = w.Write([]byte(line))
			w.(http.Flusher).Flush() // chunked: no length ahead
		}
	})
	mux.HandleFunc("/silent/api/v3/traces/"+id, func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // answers nothing until the client gives up
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, path := range []string{"/sized", "/streamed"} {
		stdout, _ := explainRun(t, 0, "-jaeger", srv.URL+path, "-trace", id)
		assert.Contains(t, stdout, "explain "+id, path)
		_, stderr := explainRun(t, 1, "-jaeger", srv.URL+path, "-trace", id, "-max-bytes", "100")
		assert.Contains(t, stderr, "jaeger's answer for trace "+id+": larger than 100B, the most explain reads (-max-bytes 100B): raise it", path)
	}

	_, stderr := explainRun(t, 1, "-jaeger", srv.URL+"/silent", "-trace", id, "-timeout", "1ms")
	assert.Contains(t, stderr, "jaeger: no whole answer within 1ms (-timeout 1ms): raise -timeout, or check "+srv.URL+"/silent")
	_, stderr = explainRun(t, 1, "-jaeger", srv.URL+"/silent", "-trace", id, "-timeout", "0s")
	assert.Contains(t, stderr, "-timeout 0s: want a duration above 0")
}

// Several traces in one file are told apart by their roots: name, outcome,
// calls, worst case, spans and start; many alike are listed once, counted.
func TestExplainNamesEachTrace(t *testing.T) {
	file := otlpFile(t, failedRun(1, 3), failedRun(2, 12))
	_, stderr := explainRun(t, 1, "-otlp-file", file)
	assert.Contains(t, stderr, "pass -trace ID: "+file+" holds 2 traces:\n"+
		"  ab000000000000000000000000000001  runtime, failed_exhausted, calls=3, calls.worst_case=12, 4 spans, started 2025-03-01 12:00:00.000 UTC\n"+
		"  ab000000000000000000000000000002  runtime, failed_exhausted, calls=12, calls.worst_case=12, 13 spans, started 2025-03-01 12:00:00.000 UTC\n")

	_, stderr = explainRun(t, 1, "-otlp-file", file, "-trace", strings.Repeat("c", 32))
	assert.Contains(t, stderr, "no trace "+strings.Repeat("c", 32)+" in "+file+", which holds 2 traces:\n  ab000000000000000000000000000001  runtime")

	var many []tracetest.SpanStubs
	for i := range maxListed + 5 {
		many = append(many, failedRun(byte(i+1), 1+i%2))
	}
	_, stderr = explainRun(t, 1, "-otlp-file", otlpFile(t, many...))
	assert.Contains(t, stderr, "holds 25 traces:\n"+
		"  ab000000000000000000000000000001  runtime, failed_exhausted, calls=1, calls.worst_case=12, 2 spans, started 2025-03-01 12:00:00.000 UTC  (and 12 more like it)\n"+
		"  ab000000000000000000000000000002  runtime, failed_exhausted, calls=2, calls.worst_case=12, 3 spans, started 2025-03-01 12:00:00.000 UTC  (and 11 more like it)\n")

	empty := filepath.Join(t.TempDir(), "empty.json")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, stderr = explainRun(t, 1, "-otlp-file", empty)
	assert.Contains(t, stderr, empty+" holds no spans")

	// A span that names no trace cannot be placed in one: a clear error,
	// not a tree with a trace of zeros, with -html too.
	orphan := filepath.Join(t.TempDir(), "orphan.json")
	require.NoError(t, os.WriteFile(orphan, []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"runtime"}]}]}]}`), 0o600))
	_, stderr = explainRun(t, 1, "-otlp-file", orphan)
	assert.Contains(t, stderr, orphan+`: setup: span "runtime" has no valid trace and span IDs`)
	_, stderr = explainRun(t, 1, "-otlp-file", orphan, "-html", filepath.Join(t.TempDir(), "page.html"))
	assert.Contains(t, stderr, `span "runtime" has no valid trace and span IDs`)
}

func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]byteSize{"64MiB": 64 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "100": 100, "100B": 100, " 2 MiB ": 2 << 20} {
		var b byteSize
		require.NoError(t, b.Set(in), in)
		assert.Equal(t, want, b, in)
	}
	for _, in := range []string{"0", "-1", "x", "1TiB", "1.5MiB", "99999999999GiB", ""} {
		var b byteSize
		assert.Error(t, b.Set(in), in)
	}
	assert.Equal(t, "64MiB", byteSize(64<<20).String())
	assert.Equal(t, "1025B", byteSize(1025).String())
	assert.Equal(t, "2GiB", byteSize(2<<30).String())
}
