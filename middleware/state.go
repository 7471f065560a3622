package middleware

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/telemetry"
)

// stateMeter counts the decisions a layer's policies made on local state
// because their shared state failed.
type stateMeter struct {
	degraded metric.Int64Counter
	breaker  []metric.AddOption
	budget   []metric.AddOption
}

func newStateMeter(mp metric.MeterProvider, layer string) *stateMeter {
	s := &stateMeter{
		breaker: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(telemetry.Layer.String(layer), telemetry.Policy.String(telemetry.PolicyCircuitBreaker)))},
		budget:  []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(telemetry.Layer.String(layer), telemetry.Policy.String(telemetry.PolicyBudget)))},
	}
	// An instrument error leaves a nil counter: metrics never fail a call.
	s.degraded, _ = mp.Meter(scope, meterScopeOpts...).Int64Counter(telemetry.MetricStateDegraded,
		metric.WithDescription("Decisions of a breaker or budget made on local state because its shared state failed."),
		metric.WithUnit("{decision}"))
	return s
}

// noteState says on span where a decision of a policy with a shared state
// came from, and, when the shared state failed, adds the degraded event and
// counts it. A policy without a shared state writes nothing.
func (c *call[Req, Resp]) noteState(ctx context.Context, span trace.Span, u state.Use) {
	if u.Policy == "" {
		return
	}
	policy := telemetry.PolicyBudget
	if u.Policy == state.PolicyBreaker {
		policy = telemetry.PolicyCircuitBreaker
	}
	if c.recording && span != nil {
		where := telemetry.StateLocal
		if u.Shared {
			where = telemetry.StateShared
		}
		span.SetAttributes(telemetry.State.String(where))
		if u.Degraded != nil {
			span.AddEvent(telemetry.EventStateDegraded, trace.WithAttributes(
				telemetry.Policy.String(policy), telemetry.StateError.String(state.DegradedType(u.Degraded))))
		}
	}
	if u.Degraded != nil && c.l.state != nil && c.l.state.degraded != nil {
		opts := c.l.state.budget
		if policy == telemetry.PolicyCircuitBreaker {
			opts = c.l.state.breaker
		}
		c.l.state.degraded.Add(ctx, 1, opts...)
	}
}

// spanOr returns span, or fallback when span is nil.
func spanOr(span, fallback trace.Span) trace.Span {
	if span != nil {
		return span
	}
	return fallback
}
