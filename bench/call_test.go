package bench

import (
	"context"
	"errors"
	goruntime "runtime"
	"testing"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

// The errors a failing handler returns, both Transient. errTransient is
// what a provider's SDK returns, typed, with its status; errPlain is what a
// tool, a runtime exec or a user's own client returns: text, which retrace
// classifies by its words.
var (
	errTransient = &policies.Error{StatusCode: 503, Message: "overloaded"}
	errPlain     = errors.New("503 service unavailable")
)

// failWith is the error each path's handler fails with; nil succeeds.
var failWith = map[string]error{"success": nil, "failure": errTransient, "failure-plain": errPlain}

// paths is the order the paths run in.
var paths = []string{"success", "failure", "failure-plain"}

func handler(err error) middleware.Handler[string, string] {
	return func(context.Context, string) (string, error) {
		if err != nil {
			return "", err
		}
		return "ok", nil
	}
}

// discard is an exporter that drops everything: the SDK's cost without I/O.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

func sampled() *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discard{}))
}

func unsampled() *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithBatcher(discard{}))
}

// variant builds one way of making the call; the returned func makes it.
type variant struct {
	name  string
	build func(b *testing.B, fail error) func(ctx context.Context) error
}

// Retry (3 attempts, no delay), circuit breaker (it never opens here),
// bulkhead: the same three policies in every variant.
const attempts = 3

// neverOpen is a breaker threshold no benchmark reaches. failsafe-go's
// breaker is given it as a ratio over a window of one execution (it opens
// when neverOpen of the last 1 failed: never), not as a count: a count of
// neverOpen is a window of neverOpen bits, a 128 MiB bitset that, live for
// the whole run, would set the GC's goal at 256 MiB for the failsafe-go
// variants alone and spare them nearly all collection work the others pay.
const neverOpen = 1 << 30

// failsafeBreaker is failsafe-go's count-based breaker that never opens.
func failsafeBreaker() circuitbreaker.Builder[string] {
	return circuitbreaker.NewBuilder[string]().WithFailureThresholdRatio(neverOpen, 1)
}

func failsafePolicies() []failsafe.Policy[string] {
	return []failsafe.Policy[string]{
		retrypolicy.NewBuilder[string]().WithMaxAttempts(attempts).ReturnLastFailure().Build(),
		failsafeBreaker().Build(),
		bulkhead.New[string](1 << 16),
	}
}

func retracePolicies() []failsafe.Policy[string] {
	return []failsafe.Policy[string]{
		policies.NewRetry[string](policies.RetryConfig{MaxAttempts: attempts}),
		policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: neverOpen}),
		policies.NewBulkhead[string](1<<16, 0),
	}
}

func retrace(opts ...middleware.Option) func(b *testing.B, fail error) func(ctx context.Context) error {
	return func(b *testing.B, fail error) func(ctx context.Context) error {
		h := middleware.Layer[string, string]("tool", middleware.Spec[string]{Policies: retracePolicies()}, opts...)(handler(fail))
		return func(ctx context.Context) error {
			_, err := h(ctx, "q")
			return err
		}
	}
}

var variants = []variant{
	{"bare", func(b *testing.B, fail error) func(ctx context.Context) error {
		h := handler(fail)
		return func(ctx context.Context) error {
			_, err := h(ctx, "q")
			return err
		}
	}},
	{"failsafe", func(b *testing.B, fail error) func(ctx context.Context) error {
		exec := failsafe.With(failsafePolicies()...)
		h := handler(fail)
		return func(ctx context.Context) error {
			_, err := exec.WithContext(ctx).Get(func() (string, error) { return h(ctx, "q") })
			return err
		}
	}},
	{"failsafe-otel", failsafeOTel},
	{"failsafe-spans", failsafeSpans},
	{"retrace-noop", retrace(middleware.WithTracerProvider(noop.NewTracerProvider()))},
	{"retrace-sdk", func(b *testing.B, fail error) func(ctx context.Context) error {
		tp := sampled()
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return retrace(middleware.WithTracerProvider(tp))(b, fail)
	}},
	{"retrace-unsampled", func(b *testing.B, fail error) func(ctx context.Context) error {
		tp := unsampled()
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return retrace(middleware.WithTracerProvider(tp))(b, fail)
	}},
}

// failsafeOTel is what a user writes without retrace: failsafe-go with the
// same policies, a span for the call (with the tool's name) and one per
// attempt (with its number), and failsafe-go's listeners recording on the
// call's span its attempts and outcome, each retry, and the breaker's state.
func failsafeOTel(b *testing.B, fail error) func(ctx context.Context) error {
	tp := sampled()
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("hand-made")
	retry := retrypolicy.NewBuilder[string]().WithMaxAttempts(attempts).ReturnLastFailure().
		OnRetryScheduled(func(e failsafe.ExecutionScheduledEvent[string]) {
			trace.SpanFromContext(e.Context()).AddEvent("retry scheduled", trace.WithAttributes(
				attribute.Int("attempt", e.Attempts()), attribute.Int64("delay_ms", e.Delay.Milliseconds())))
		}).Build()
	breaker := failsafeBreaker().
		OnStateChanged(func(e circuitbreaker.StateChangedEvent) {
			trace.SpanFromContext(e.Context()).AddEvent("breaker " + e.NewState.String())
		}).Build()
	exec := failsafe.With[string](retry, breaker, bulkhead.New[string](1<<16)).
		OnDone(func(e failsafe.ExecutionDoneEvent[string]) {
			outcome := "success"
			if e.Error != nil {
				outcome = "failure"
			}
			trace.SpanFromContext(e.Context()).SetAttributes(attribute.Int("attempts", e.Attempts()), attribute.String("outcome", outcome))
		})
	h := handler(fail)
	return func(ctx context.Context) error {
		ctx, span := tracer.Start(ctx, "tool", trace.WithAttributes(attribute.String("tool.name", "search_docs")))
		defer span.End()
		_, err := exec.WithContext(ctx).GetWithExecution(func(e failsafe.Execution[string]) (string, error) {
			actx, aspan := tracer.Start(e.Context(), "tool attempt", trace.WithAttributes(attribute.Int("attempt", e.Attempts())))
			defer aspan.End()
			out, err := h(actx, "q")
			if err != nil {
				aspan.SetStatus(codes.Error, err.Error())
				aspan.SetAttributes(attribute.String("error.type", errorType(err)))
			}
			return out, err
		})
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		return err
	}
}

// failsafeSpans is the lean hand-made baseline: failsafe-go with the same
// policies and only the spans a careful user adds by hand, with nothing
// else: a span for the call, a child span per attempt with its number, and
// on what failed status Error and error.type. No listeners, no attribute
// on a success but the attempt's number: the least a user would write to
// see each call and each attempt in a trace.
func failsafeSpans(b *testing.B, fail error) func(ctx context.Context) error {
	tp := sampled()
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("hand-made")
	exec := failsafe.With(failsafePolicies()...)
	h := handler(fail)
	return func(ctx context.Context) error {
		ctx, span := tracer.Start(ctx, "tool")
		defer span.End()
		_, err := exec.WithContext(ctx).GetWithExecution(func(e failsafe.Execution[string]) (string, error) {
			actx, aspan := tracer.Start(e.Context(), "tool attempt", trace.WithAttributes(attribute.Int("attempt", e.Attempts())))
			defer aspan.End()
			out, err := h(actx, "q")
			if err != nil {
				recordFailure(aspan, err)
			}
			return out, err
		})
		if err != nil {
			recordFailure(span, err)
		}
		return err
	}
}

// BenchmarkCall makes one call per iteration, on one goroutine.
func BenchmarkCall(b *testing.B) {
	for _, path := range paths {
		for _, v := range variants {
			b.Run(path+"/"+v.name, func(b *testing.B) {
				call := v.build(b, failWith[path])
				ctx := context.Background()
				b.ReportAllocs()
				settle()
				for b.Loop() {
					if err := call(ctx); (err != nil) != (path != "success") {
						b.Fatalf("unexpected result: %v", err)
					}
				}
			})
		}
	}
}

// BenchmarkCallParallel makes the same calls from GOMAXPROCS goroutines.
func BenchmarkCallParallel(b *testing.B) {
	for _, path := range paths {
		for _, v := range variants {
			b.Run(path+"/"+v.name, func(b *testing.B) {
				call := v.build(b, failWith[path])
				b.ReportAllocs()
				settle()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					for pb.Next() {
						if err := call(ctx); (err != nil) != (path != "success") {
							b.Errorf("unexpected result: %v", err)
							return
						}
					}
				})
			})
		}
	}
}

// settle collects the garbage the variants before left, before the timer
// starts: each variant then pays for its own allocations only, not for a
// collection that a previous one made due.
func settle() { goruntime.GC() }

// TestBreakersNeverOpen holds the benchmarks' premise: on the failure path
// every call makes all its attempts, through failsafe-go's breaker and
// retrace's alike, so the variants do the same work.
func TestBreakersNeverOpen(t *testing.T) {
	const calls = 2000
	for _, name := range []string{"failsafe", "retrace"} {
		n := 0
		h := func(context.Context, string) (string, error) { n++; return "", errTransient }
		call := middleware.Policies[string, string]("tool", retracePolicies()...)(h)
		if name == "failsafe" {
			exec := failsafe.With(failsafePolicies()...)
			call = func(ctx context.Context, req string) (string, error) {
				return exec.Get(func() (string, error) { return h(ctx, req) })
			}
		}
		for range calls {
			if _, err := call(context.Background(), "q"); err == nil {
				t.Fatalf("%s: a failing call succeeded", name)
			}
		}
		if n != calls*attempts {
			t.Errorf("%s: the handler ran %d times in %d calls, want %d: the breaker opened", name, n, calls, calls*attempts)
		}
	}
}
