package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// execAgainst runs one Exec (runtime → session → the real openai-go
// client) against a fault server playing script, traced into rec, and
// returns the trace ID its error gives, as a user logs it.
func execAgainst(t *testing.T, tp trace.TracerProvider, script retracetest.Script) string {
	t.Helper()
	srv := retracetest.New(script)
	require.NoError(t, srv.Start())
	defer srv.Close()
	opts := []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(clock.NewVirtual(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)))}
	s, err := session.New(session.Config{
		Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-test-0123456789abcdefghij"}),
		Model:    "gpt-test", Options: opts,
	})
	require.NoError(t, err)
	_, err = runtime.New(s, runtime.Config{Options: opts}).Exec(context.Background(), "hi")
	require.Error(t, err)
	sc, ok := policies.TraceOf(err)
	require.True(t, ok, "a traced run's error names its trace")
	return sc.TraceID().String()
}

// The trace ID a failed Exec's error gives, as it gives it (TraceID's
// String, 32 lowercase hex digits), is what retrace explain -trace takes:
// from a file of OTLP JSON holding that run and another (one line each, as
// the demo's -otlp-file writes them), and from Jaeger's query API.
func TestExplainTheTraceAnErrorGives(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	other := execAgainst(t, tp, retracetest.Always(retracetest.InvalidAPIKey()))
	id := execAgainst(t, tp, retracetest.Always(retracetest.ServerError(503)))
	require.NotEqual(t, other, id)
	require.Len(t, id, 32)

	byTrace := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byTrace[s.SpanContext().TraceID().String()] = append(byTrace[s.SpanContext().TraceID().String()], s)
	}
	require.Len(t, byTrace, 2)
	var file, one bytes.Buffer
	require.NoError(t, setup.WriteOTLPJSON(&file, byTrace[other]))
	require.NoError(t, setup.WriteOTLPJSON(&file, byTrace[id]))
	require.NoError(t, setup.WriteOTLPJSON(&one, byTrace[id]))
	path := filepath.Join(t.TempDir(), "runs.json")
	require.NoError(t, os.WriteFile(path, file.Bytes(), 0o600))

	check := func(t *testing.T, stdout string) {
		t.Helper()
		assert.Contains(t, stdout, "trace "+id+"\n")
		assert.Contains(t, stdout, "explain "+id+" (runtime, failed_exhausted")
		assert.Contains(t, stdout, "runtime(3) × session(4) = 12")
		assert.Contains(t, stdout, "12 × transient server_error")
		assert.NotContains(t, stdout, other)
	}
	t.Run("otlp-file", func(t *testing.T) {
		stdout, _ := explainRun(t, 0, "-otlp-file", path, "-trace", id)
		check(t, stdout)
		_, stderr := explainRun(t, 1, "-otlp-file", path)
		assert.Contains(t, stderr, "pass -trace ID: "+path+" holds 2 traces:")
		assert.Contains(t, stderr, "  "+id+"  runtime, failed_exhausted", "the file names it by the ID the error gives")
	})
	t.Run("jaeger", func(t *testing.T) {
		var (
			mu    sync.Mutex
			asked []string
		)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			asked = append(asked, r.URL.Path)
			mu.Unlock()
			if r.URL.Path != "/api/v3/traces/"+id {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write(one.Bytes())
		}))
		defer srv.Close()
		stdout, _ := explainRun(t, 0, "-jaeger", srv.URL, "-trace", id)
		check(t, stdout)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{"/api/v3/traces/" + id}, asked, "the ID is asked for as the error gave it")
	})
}
