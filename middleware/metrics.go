package middleware

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// instruments are a layer's metrics: calls by outcome and attempts.
type instruments struct {
	calls     metric.Int64Counter
	attempts  metric.Int64Counter
	byOutcome map[policies.Outcome][]metric.AddOption
	layer     []metric.AddOption
}

var allOutcomes = []policies.Outcome{
	policies.OutcomeSuccess, policies.OutcomeSuccessAfterRetry, policies.OutcomeFailedPermanent,
	policies.OutcomeFailedFatal, policies.OutcomeFailedUnknown, policies.OutcomeFailedExhausted,
	policies.OutcomeBudgetExhausted, policies.OutcomeRejected, policies.OutcomeCanceled, policies.OutcomeStepLimit,
}

func newInstruments(mp metric.MeterProvider, layer string) *instruments {
	m := mp.Meter(scope)
	in := &instruments{
		byOutcome: make(map[policies.Outcome][]metric.AddOption, len(allOutcomes)),
		layer:     []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(telemetry.Layer.String(layer)))},
	}
	// Instrument errors leave a no-op instrument in place; metrics never
	// fail a call.
	in.calls, _ = m.Int64Counter("retrace.layer.calls", metric.WithDescription("Calls through a retrace layer, by outcome."), metric.WithUnit("{call}"))
	in.attempts, _ = m.Int64Counter("retrace.layer.attempts", metric.WithDescription("Attempts made by a retrace layer, the first included."), metric.WithUnit("{attempt}"))
	for _, o := range allOutcomes {
		// Options are built once, as slices, so that recording allocates nothing.
		in.byOutcome[o] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(telemetry.Layer.String(layer), telemetry.Outcome.String(string(o))))}
	}
	return in
}

func (in *instruments) record(ctx context.Context, outcome policies.Outcome, attempts int) {
	if in.calls != nil {
		if opt, ok := in.byOutcome[outcome]; ok {
			in.calls.Add(ctx, 1, opt...)
		}
	}
	if in.attempts != nil {
		in.attempts.Add(ctx, int64(attempts), in.layer...)
	}
}
