package policies_test

import (
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
)

// Log a failure with the trace that holds its story: the trace ID finds it
// in a tracing backend, and `retrace explain -trace ID` explains it.
func ExampleTraceOf() {
	// IDs counted from 1 instead of random ones, so that the output is the
	// same on every run; a real tracer provider is made the same way
	// without WithIDGenerator.
	tp := sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(&countedIDs{}))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	rt := runtime.New(runtime.AgentFunc(func(context.Context, string) (session.Message, error) {
		return session.Message{}, &policies.Error{StatusCode: 401, Code: "invalid_api_key", Message: "Incorrect API key provided"}
	}), runtime.Config{Options: []middleware.Option{middleware.WithTracerProvider(tp)}})
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: withoutTime}))

	_, err := rt.Exec(context.Background(), "Summarise the incident")
	if sc, ok := policies.TraceOf(err); ok {
		log.Error("exec failed", "err", err, "trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String())
	} else {
		log.Error("exec failed", "err", err) // no span recorded it: no ID to give
	}
	// Output:
	// level=ERROR msg="exec failed" err="exec failed permanently after 1 attempt: APIError: 401 invalid_api_key: Incorrect API key provided" trace_id=00000000000000000000000000000001 span_id=0000000000000001
}

// countedIDs gives trace and span IDs counted from 1.
type countedIDs struct{ trace, span atomic.Uint64 }

func (g *countedIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var t trace.TraceID
	binary.BigEndian.PutUint64(t[8:], g.trace.Add(1))
	return t, g.NewSpanID(ctx, t)
}

func (g *countedIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var s trace.SpanID
	binary.BigEndian.PutUint64(s[:], g.span.Add(1))
	return s
}

// withoutTime drops the record's time, which differs on every run.
func withoutTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}
