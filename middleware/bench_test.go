package middleware_test

import (
	"context"
	"testing"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

// BenchmarkChain measures a successful call: a bare handler, raw failsafe-go
// with retry, circuit breaker and bulkhead, and retrace's chain with the same
// policies under the no-op tracer and under an SDK tracer that samples
// everything and exports nowhere. bench/ has the full comparison.
func BenchmarkChain(b *testing.B) {
	ctx := context.Background()
	handler := func(context.Context, string) (string, error) { return "ok", nil }

	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = handler(ctx, "q")
		}
	})
	b.Run("failsafe", func(b *testing.B) {
		exec := failsafe.With[string](
			retrypolicy.NewBuilder[string]().WithMaxAttempts(3).Build(),
			circuitbreaker.NewBuilder[string]().WithFailureThreshold(5).Build(),
			bulkhead.New[string](64),
		)
		b.ReportAllocs()
		for b.Loop() {
			_, _ = exec.WithContext(ctx).Get(func() (string, error) { return handler(ctx, "q") })
		}
	})
	retrace := func(b *testing.B, opts ...middleware.Option) {
		h := middleware.Layer[string, string]("tool", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3}), policies.NewCircuitBreaker[string](policies.BreakerConfig{}), policies.NewBulkhead[string](64, 0)), opts...)(handler)
		b.ReportAllocs()
		for b.Loop() {
			_, _ = h(ctx, "q")
		}
	}
	b.Run("retrace-noop", func(b *testing.B) {
		retrace(b, middleware.WithTracerProvider(noop.NewTracerProvider()))
	})
	b.Run("retrace-sdk", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		defer func() { _ = tp.Shutdown(ctx) }()
		retrace(b, middleware.WithTracerProvider(tp))
	})
}
