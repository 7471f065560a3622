package middleware

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/instrument"
	"github.com/retrace-go/retrace/telemetry"
)

// instruments are a layer's metrics. Every option a recording passes is
// built once, with the layer, so that recording allocates nothing on a
// call's path; an instrument the meter refuses stays a no-op, so metrics
// never fail a call.
type instruments struct {
	mp          metric.MeterProvider
	calls       metric.Int64Counter
	attempts    metric.Int64Histogram
	delay       metric.Float64Histogram
	refusals    metric.Int64Counter
	transitions metric.Int64Counter
	state       metric.Int64Gauge
	byOutcome   map[string][]metric.AddOption
	layerAdd    []metric.AddOption
	layerRecord []metric.RecordOption
	genai       *genAIInstruments // nil unless the layer's Spec has GenAIMetrics
}

// allOutcomes are the values of retrace.outcome a call through a layer is
// counted under; an outcome missing here would go uncounted (a test checks
// the list against package telemetry's constants).
var allOutcomes = []string{telemetry.OutcomeSuccess, telemetry.OutcomeSuccessAfterRetry, telemetry.OutcomeFailedPermanent, telemetry.OutcomeFailedFatal, telemetry.OutcomeFailedUnknown, telemetry.OutcomeFailedTransient, telemetry.OutcomeFailedUserAction, telemetry.OutcomeFailedExhausted, telemetry.OutcomeBudgetExhausted, telemetry.OutcomeRejected, telemetry.OutcomeCanceled, telemetry.OutcomeStepLimit}

// newInstruments are the metrics of layer on mp, the GenAI client ones
// too when genai.
func newInstruments(mp metric.MeterProvider, layer string, cfg config, genai bool) *instruments {
	m := mp.Meter(scope, meterScopeOpts...)
	set := attribute.NewSet(telemetry.Layer.String(layer))
	in := &instruments{
		mp:          mp,
		byOutcome:   make(map[string][]metric.AddOption, len(allOutcomes)),
		layerAdd:    []metric.AddOption{metric.WithAttributeSet(set)},
		layerRecord: []metric.RecordOption{metric.WithAttributeSet(set)},
	}
	in.calls, _ = m.Int64Counter(telemetry.MetricLayerCalls, metric.WithUnit(instrument.UnitCall),
		metric.WithDescription("Calls through a retrace layer, by outcome."))
	in.attempts, _ = m.Int64Histogram(telemetry.MetricLayerAttempts, metric.WithUnit(instrument.UnitAttempt),
		metric.WithDescription("Attempts each call through a retrying layer made, the first included."),
		metric.WithExplicitBucketBoundaries(instrument.AttemptBuckets()...))
	in.delay, _ = m.Float64Histogram(telemetry.MetricRetryDelay, metric.WithUnit(instrument.UnitSeconds),
		metric.WithDescription("Backoff waited before a retry."),
		metric.WithExplicitBucketBoundaries(instrument.RetryDelayBuckets()...))
	in.refusals, _ = m.Int64Counter(telemetry.MetricBudgetRefusals, metric.WithUnit(instrument.UnitRefusal),
		metric.WithDescription("Retries a retry budget refused."))
	in.transitions, _ = m.Int64Counter(telemetry.MetricCircuitTransitions, metric.WithUnit(instrument.UnitTransition),
		metric.WithDescription("Circuit breaker transitions, by the state moved to."))
	in.state, _ = m.Int64Gauge(telemetry.MetricCircuitState, metric.WithUnit(instrument.UnitState),
		metric.WithDescription("1 for the state a circuit breaker is in, 0 for the others it has been in."))
	for _, o := range allOutcomes {
		in.byOutcome[o] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(telemetry.Layer.String(layer), telemetry.Outcome.String(string(o))))}
	}
	if genai {
		in.genai = newGenAIInstruments(m, cfg.attrs)
	}
	return in
}

// record records the end of a call through the layer.
func (in *instruments) record(ctx context.Context, outcome string, attempts int, retrying bool) {
	if in.calls != nil {
		if opt, ok := in.byOutcome[outcome]; ok {
			in.calls.Add(ctx, 1, opt...)
		}
	}
	if retrying && in.attempts != nil {
		in.attempts.Record(ctx, int64(attempts), in.layerRecord...)
	}
}

// retried records the backoff waited before a retry.
func (in *instruments) retried(ctx context.Context, delay time.Duration) {
	if in.delay != nil {
		in.delay.Record(ctx, delay.Seconds(), in.layerRecord...)
	}
}

// refused records a retry that a budget refused.
func (in *instruments) refused(ctx context.Context) {
	if in.refusals != nil {
		in.refusals.Add(ctx, 1, in.layerAdd...)
	}
}

// watch records b's state and transitions, once per breaker and meter
// provider however many layers drive b, so that a shared breaker's
// transition is counted once.
func (in *instruments) watch(b *engine.Breaker, layer string) {
	if in.transitions == nil || in.state == nil {
		return
	}
	name := b.Limits().Name
	if name == "" {
		name = layer
	}
	var key any = in
	if t := reflect.TypeOf(in.mp); t != nil && t.Comparable() {
		key = watchKey{in.mp}
	}
	w := &breakerWatch{b: b, in: in, name: name}
	if b.Watch(key, w.changed) {
		w.show()
	}
}

type watchKey struct{ mp metric.MeterProvider }

// breakerWatch is one breaker as its metrics see it.
type breakerWatch struct {
	b    *engine.Breaker
	in   *instruments
	name string

	mu   sync.Mutex
	seen map[circuitbreaker.State]bool // the states the gauge has a series for
}

func (w *breakerWatch) changed(_, to circuitbreaker.State) {
	w.in.transitions.Add(context.Background(), 1, metric.WithAttributes(
		telemetry.CircuitName.String(w.name), telemetry.CircuitState.String(circuitState(to))))
	w.show()
}

// show sets the gauge from the state the breaker is in now, not the one a
// transition moved to: of transitions told concurrently, the last told
// then leaves the gauge at the breaker's state, in whatever order they ran.
func (w *breakerWatch) show() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[circuitbreaker.State]bool{}
	}
	now := w.b.State()
	w.seen[now] = true
	for s := range w.seen {
		v := int64(0)
		if s == now {
			v = 1
		}
		w.in.state.Record(context.Background(), v, metric.WithAttributes(
			telemetry.CircuitName.String(w.name), telemetry.CircuitState.String(circuitState(s))))
	}
}
