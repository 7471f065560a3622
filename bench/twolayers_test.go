package bench

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// Two retrying layers, nested as an agent runtime nests them: the runtime's
// exec retry around the session's retry around a handler that always fails
// Transient, with no backoff delay.
const (
	runtimeAttempts = 3
	sessionAttempts = 4
	// leafCalls is the handler calls one op makes.
	leafCalls = runtimeAttempts * sessionAttempts
	// twoLayerSpans is the spans one op makes: a span per layer call and per
	// attempt, 1+3 for the runtime and 1+4 for each of its 3 session calls.
	twoLayerSpans = 1 + runtimeAttempts + runtimeAttempts*(1+sessionAttempts)
)

type stringHandler = middleware.Handler[string, string]

// twoLayers is one way of nesting the two layers around a handler.
type twoLayers struct {
	name string
	// tp is the tracer provider the benchmark traces with; nil: no tracing.
	tp func(b *testing.B) trace.TracerProvider
	// build nests the layers around h, tracing with tp.
	build func(tp trace.TracerProvider, h stringHandler) stringHandler
	// root is what the outermost span must carry at the end of a failed op.
	root []attribute.KeyValue
}

var twoLayerVariants = []twoLayers{
	{name: "failsafe", build: failsafeTwoLayers},
	{name: "failsafe-otel", tp: sdkProvider, build: failsafeOTelTwoLayers, root: []attribute.KeyValue{
		attribute.String("layer", "runtime"), attribute.Int("attempts", runtimeAttempts), attribute.String("outcome", "failure"),
	}},
	{name: "failsafe-spans", tp: sdkProvider, build: failsafeSpansTwoLayers},
	{name: "retrace-noop", tp: noopProvider, build: retraceTwoLayers, root: retraceRoot},
	{name: "retrace-sdk", tp: sdkProvider, build: retraceTwoLayers, root: retraceRoot},
}

var retraceRoot = []attribute.KeyValue{
	telemetry.Layer.String("runtime"),
	telemetry.Attempts.Int(runtimeAttempts),
	telemetry.Outcome.String(string(telemetry.OutcomeFailedExhausted)),
	telemetry.Calls.Int64(leafCalls),
	telemetry.CallsWorstCase.Int64(leafCalls),
}

func sdkProvider(b *testing.B) trace.TracerProvider {
	tp := sampled()
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

func noopProvider(*testing.B) trace.TracerProvider { return noop.NewTracerProvider() }

// failsafeTwoLayers is raw failsafe-go: one executor per layer, the inner
// one run by the outer one's function. failsafe-go's retry policies retry
// every error, with no delay unless one is set.
func failsafeTwoLayers(_ trace.TracerProvider, h stringHandler) stringHandler {
	session := failsafeLayer(retrypolicy.NewBuilder[string]().WithMaxAttempts(sessionAttempts).Build(), h)
	return failsafeLayer(retrypolicy.NewBuilder[string]().WithMaxAttempts(runtimeAttempts).ReturnLastFailure().Build(), session)
}

func failsafeLayer(rp retrypolicy.RetryPolicy[string], next stringHandler) stringHandler {
	exec := failsafe.With[string](rp)
	return func(ctx context.Context, req string) (string, error) {
		return exec.WithContext(ctx).GetWithExecution(func(e failsafe.Execution[string]) (string, error) {
			return next(e.Context(), req)
		})
	}
}

// failsafeOTelTwoLayers is the same executors instrumented by hand, with
// the spans retrace makes: one per layer call and one per attempt.
func failsafeOTelTwoLayers(tp trace.TracerProvider, h stringHandler) stringHandler {
	tracer := tp.Tracer("hand-made")
	session := tracedLayer(tracer, "session", retrypolicy.NewBuilder[string]().WithMaxAttempts(sessionAttempts).Build(), h)
	return tracedLayer(tracer, "runtime", retrypolicy.NewBuilder[string]().WithMaxAttempts(runtimeAttempts).ReturnLastFailure().Build(), session)
}

// failsafeSpansTwoLayers is the lean hand-made baseline for two layers: the
// same executors with only the spans (leanLayer), no listeners.
func failsafeSpansTwoLayers(tp trace.TracerProvider, h stringHandler) stringHandler {
	tracer := tp.Tracer("hand-made")
	session := leanLayer(tracer, "session", retrypolicy.NewBuilder[string]().WithMaxAttempts(sessionAttempts).Build(), h)
	return leanLayer(tracer, "runtime", retrypolicy.NewBuilder[string]().WithMaxAttempts(runtimeAttempts).ReturnLastFailure().Build(), session)
}

// leanLayer is the least a careful user writes around one executor to see
// its calls and attempts: a span named for the layer, a child span per
// attempt with its number, and status Error and error.type on what failed.
func leanLayer(tracer trace.Tracer, name string, rp retrypolicy.RetryPolicy[string], next stringHandler) stringHandler {
	exec := failsafe.With[string](rp)
	attemptName := name + " attempt"
	return func(ctx context.Context, req string) (string, error) {
		ctx, span := tracer.Start(ctx, name)
		defer span.End()
		out, err := exec.WithContext(ctx).GetWithExecution(func(e failsafe.Execution[string]) (string, error) {
			actx, aspan := tracer.Start(e.Context(), attemptName, trace.WithAttributes(attribute.Int("attempt", e.Attempts())))
			defer aspan.End()
			out, err := next(actx, req)
			if err != nil {
				recordFailure(aspan, err)
			}
			return out, err
		})
		if err != nil {
			recordFailure(span, err)
		}
		return out, err
	}
}

// tracedLayer is what a careful user writes around one executor: a layer
// span named for the layer, a child span per attempt with its number, status
// Error and error.type on what failed, and the layer's attempts and outcome
// recorded on its span by failsafe-go's done listener. The attempt's context
// reaches next, so a nested layer's span is a child of this attempt's.
func tracedLayer(tracer trace.Tracer, name string, rp retrypolicy.RetryPolicy[string], next stringHandler) stringHandler {
	exec := failsafe.With[string](rp).OnDone(func(e failsafe.ExecutionDoneEvent[string]) {
		outcome := "success"
		if e.Error != nil {
			outcome = "failure"
		}
		trace.SpanFromContext(e.Context()).SetAttributes(attribute.Int("attempts", e.Attempts()), attribute.String("outcome", outcome))
	})
	layerAttrs := trace.WithAttributes(attribute.String("layer", name))
	attemptName := name + " attempt"
	return func(ctx context.Context, req string) (string, error) {
		ctx, span := tracer.Start(ctx, name, layerAttrs)
		defer span.End()
		out, err := exec.WithContext(ctx).GetWithExecution(func(e failsafe.Execution[string]) (string, error) {
			actx, aspan := tracer.Start(e.Context(), attemptName, trace.WithAttributes(attribute.Int("attempt", e.Attempts())))
			defer aspan.End()
			out, err := next(actx, req)
			if err != nil {
				recordFailure(aspan, err)
			}
			return out, err
		})
		if err != nil {
			recordFailure(span, err)
		}
		return out, err
	}
}

func recordFailure(span trace.Span, err error) {
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(attribute.String("error.type", errorType(err)))
}

// errorType is the error.type a user derives by hand: the API status, else
// OTel's fallback.
func errorType(err error) string {
	if api, ok := errors.AsType[*policies.Error](err); ok {
		return strconv.Itoa(api.StatusCode)
	}
	return "_OTHER"
}

// retraceTwoLayers is the runtime's retry around the session's, each a
// retrace layer.
func retraceTwoLayers(tp trace.TracerProvider, h stringHandler) stringHandler {
	opts := []middleware.Option{middleware.WithTracerProvider(tp)}
	return middleware.Chain(
		middleware.Layer[string, string]("runtime", middleware.Spec[string]{Policies: []failsafe.Policy[string]{policies.NewRetry[string](policies.RetryConfig{MaxAttempts: runtimeAttempts, RetryUnknown: true})}}, opts...),
		middleware.Layer[string, string]("session", middleware.Spec[string]{Policies: []failsafe.Policy[string]{policies.NewRetry[string](policies.RetryConfig{MaxAttempts: sessionAttempts})}}, opts...),
	)(h)
}

// counted counts the calls that reach next.
func counted(calls *atomic.Int64, next stringHandler) stringHandler {
	return func(ctx context.Context, req string) (string, error) {
		calls.Add(1)
		return next(ctx, req)
	}
}

// checkTwoLayerSpans runs one op of v under a span recorder: it must fail
// after 12 handler calls and make 19 spans, each attempt span a child of its
// layer's span and each session span a child of a runtime attempt span.
func checkTwoLayerSpans(b *testing.B, v twoLayers, fail error) {
	b.Helper()
	ctx := context.Background()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(ctx) }()
	var calls atomic.Int64
	if _, err := v.build(tp, counted(&calls, handler(fail)))(ctx, "q"); err == nil {
		b.Fatal("the op succeeded; it must fail")
	}
	if n := calls.Load(); n != leafCalls {
		b.Fatalf("the handler was called %d times, want %d", n, leafCalls)
	}
	spans := sr.Ended()
	if len(spans) != twoLayerSpans {
		b.Fatalf("%d spans, want %d", len(spans), twoLayerSpans)
	}
	byID := make(map[trace.SpanID]sdktrace.ReadOnlySpan, len(spans))
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	edges := map[string]int{}
	var root sdktrace.ReadOnlySpan
	for _, s := range spans {
		p, ok := byID[s.Parent().SpanID()]
		if !ok {
			root = s
			edges["> "+s.Name()]++
			continue
		}
		edges[p.Name()+" > "+s.Name()]++
		if s.Status().Code != codes.Error {
			b.Fatalf("span %q has status %v, want Error", s.Name(), s.Status().Code)
		}
	}
	want := map[string]int{
		"> runtime":                 1,
		"runtime > runtime attempt": runtimeAttempts,
		"runtime attempt > session": runtimeAttempts,
		"session > session attempt": leafCalls,
	}
	if !maps.Equal(edges, want) {
		b.Fatalf("span tree (parent > child: count) %v, want %v", edges, want)
	}
	for _, kv := range v.root {
		if got := value(root.Attributes(), kv.Key); got != kv.Value {
			b.Fatalf("root span %s = %v, want %v", kv.Key, got.String(), kv.Value.String())
		}
	}
}

// BenchmarkTwoLayers makes one op per iteration, on one goroutine: the
// runtime's retry (3 attempts) around the session's (4 attempts) around a
// handler that always fails Transient, 12 handler calls and, traced, 19
// spans.
func BenchmarkTwoLayers(b *testing.B) { benchTwoLayers(b, errTransient) }

// BenchmarkTwoLayersPlain is BenchmarkTwoLayers with a handler that fails
// with a plain error, classified by its text.
func BenchmarkTwoLayersPlain(b *testing.B) { benchTwoLayers(b, errPlain) }

func benchTwoLayers(b *testing.B, fail error) {
	for _, v := range twoLayerVariants {
		b.Run(v.name, func(b *testing.B) {
			var tp trace.TracerProvider
			if v.tp != nil {
				checkTwoLayerSpans(b, v, fail)
				tp = v.tp(b)
			}
			var calls atomic.Int64
			op := v.build(tp, counted(&calls, handler(fail)))
			ctx := context.Background()
			if _, err := op(ctx, "q"); err == nil {
				b.Fatal("the op succeeded; it must fail")
			}
			calls.Store(0)
			b.ReportAllocs()
			settle()
			for b.Loop() {
				_, _ = op(ctx, "q")
			}
			if n := calls.Load(); n != int64(leafCalls*b.N) {
				b.Fatalf("the handler was called %d times in %d ops, want %d", n, b.N, leafCalls*b.N)
			}
		})
	}
}
