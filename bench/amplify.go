package bench

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// AmpRow is what one stack of retry layers makes of one request to a
// provider that is down.
type AmpRow struct {
	Setup      string
	Requests   int64  // requests the provider received
	TraceCalls int64  // the root's retrace.calls: the leaf calls the trace saw
	WorstCase  int64  // the root's retrace.calls.worst_case
	Outcome    string // the root's retrace.outcome
}

// Amplification runs the default retry layers, with their presets, over a
// provider that always answers 503, in virtual time.
func Amplification() []AmpRow {
	type setup struct {
		name     string
		runtime  int // the runtime layer's attempts, 0 for no runtime layer
		budget   int // the task budget, 0 for none
		sdkRetry int // the SDK's own attempts inside each model call, 0 for none
	}
	var rows []AmpRow
	for _, s := range []setup{
		{name: "1 layer: session (4 attempts)"},
		{name: "2 layers: runtime 3 × session 4 (the defaults)", runtime: 3},
		{name: "2 layers, single owner: runtime 1 × session 4", runtime: 1},
		{name: "2 layers under a task budget of 6 retries", runtime: 3, budget: 6},
		{name: "3 layers: runtime 3 × session 4 × the SDK's own 3", runtime: 3, sdkRetry: 3},
	} {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		clk := clock.NewVirtual(time.Unix(0, 0))
		opts := []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(clk)}
		var requests atomic.Int64
		provider := func(context.Context, string) (string, error) {
			requests.Add(1)
			return "", &policies.Error{StatusCode: 503, Message: "Service unavailable"}
		}
		model := provider
		modelOpts := opts
		if s.sdkRetry > 0 {
			// The SDK's hidden loop: it retries inside one model call.
			model = func(ctx context.Context, req string) (string, error) {
				var err error
				for range s.sdkRetry {
					if _, err = provider(ctx, req); err == nil {
						return "ok", nil
					}
				}
				return "", err
			}
			modelOpts = append(modelOpts, middleware.WithInnerAttempts(s.sdkRetry))
		}
		h := middleware.Layer[string, string]("model", middleware.Spec[string]{}, modelOpts...)(model)
		h = middleware.Layer[string, string]("session", middleware.Spec[string]{
			Policies: []failsafe.Policy[string]{policies.NewRetry[string](policies.SessionRetry)},
		}, opts...)(h)
		if s.runtime > 0 {
			cfg := policies.RuntimeRetry
			cfg.MaxAttempts = s.runtime
			h = middleware.Layer[string, string]("runtime", middleware.Spec[string]{
				Policies: []failsafe.Policy[string]{policies.NewRetry[string](cfg)},
			}, opts...)(h)
		}
		ctx := context.Background()
		if s.budget > 0 {
			ctx = policies.WithTaskBudget(ctx, s.budget)
		}
		_, _ = h(ctx, "summarise the incident")
		row := AmpRow{Setup: s.name, Requests: requests.Load()}
		for _, span := range rec.Ended() {
			if span.Parent().IsValid() {
				continue
			}
			row.TraceCalls = value(span.Attributes(), telemetry.Calls).AsInt64()
			row.WorstCase = value(span.Attributes(), telemetry.CallsWorstCase).AsInt64()
			row.Outcome = value(span.Attributes(), telemetry.Outcome).AsString()
		}
		_ = tp.Shutdown(ctx)
		rows = append(rows, row)
	}
	return rows
}

func value(attrs []attribute.KeyValue, k attribute.Key) attribute.Value {
	for _, kv := range attrs {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}
