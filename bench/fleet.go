package bench

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/telemetry"
)

// FleetWorker is one worker of a fleet: it makes Calls logical calls, Every
// apart on Clock, through a layer with ToolRetry and a circuit breaker on
// the policies' presets (5 failures, 60 s cool-down, one probe), or on
// RateBreaker's failure rate with Rate, shared through State when it is set. The fleet demo, the Redis command and the
// Redis integration test run it, in goroutines or in processes.
type FleetWorker struct {
	Name    string // the breaker's name: workers of one name share it
	Calls   int
	Every   time.Duration
	State   state.State // nil → a breaker of this worker's own
	Rate    bool        // the breaker opens on RateBreaker's failure rate
	Clock   clock.Clock
	Options []middleware.Option // the layer's (a tracer provider)
	Call    func(ctx context.Context) error
}

// FleetOutcomes counts a worker's calls by outcome (retrace.outcome).
type FleetOutcomes map[string]int

// Total is the number of calls counted.
func (o FleetOutcomes) Total() int {
	n := 0
	for _, v := range o {
		n += v
	}
	return n
}

// Run makes the worker's calls and counts how each ended. A call whose end
// is not one of retrace's outcomes counts as "unknown".
func (w FleetWorker) Run(ctx context.Context) FleetOutcomes {
	retry := policies.ToolRetry
	retry.Clock = w.Clock
	layer := middleware.Layer[struct{}, struct{}]("model", middleware.Spec[struct{}]{
		Policies: []failsafe.Policy[struct{}]{policies.NewRetry[struct{}](retry), policies.NewCircuitBreaker[struct{}](w.breaker())},
	}, append([]middleware.Option{middleware.WithClock(w.Clock)}, w.Options...)...)
	h := layer(func(ctx context.Context, _ struct{}) (struct{}, error) { return struct{}{}, w.Call(ctx) })
	out := FleetOutcomes{}
	for i := range w.Calls {
		if i > 0 {
			if w.Clock.Sleep(ctx, w.Every) != nil {
				break
			}
		}
		_, err := h(ctx, struct{}{})
		out[OutcomeOf(err)]++
	}
	return out
}

func (w FleetWorker) breaker() policies.BreakerConfig {
	cfg := policies.BreakerConfig{Name: w.Name, State: w.State, Clock: w.Clock}
	if w.Rate {
		cfg = RateBreaker(cfg)
	}
	return cfg
}

// RateBreaker is cfg in the failure-rate mode the fleet storm measures
// (SharedRateFleet): it opens when at least half of the calls of the last
// 10 s failed, once the window holds 20, wherever in the fleet they were
// made. Its other settings are cfg's.
func RateBreaker(cfg policies.BreakerConfig) policies.BreakerConfig {
	cfg.FailureRate, cfg.MinimumCalls, cfg.Window = 0.5, 20, 10*time.Second
	return cfg
}

// OutcomeOf is the outcome a call through a retrace layer ended with.
func OutcomeOf(err error) string {
	fe, ok := errors.AsType[*policies.Error](err)
	switch {
	case err == nil:
		return string(telemetry.OutcomeSuccess)
	case ok && fe.Outcome != "":
		return string(fe.Outcome)
	case errors.Is(err, circuitbreaker.ErrOpen), errors.Is(err, bulkhead.ErrFull):
		return string(telemetry.OutcomeRejected)
	}
	return "unknown"
}

// HTTPCall returns a call that GETs url and fails with the provider's
// answer when it is an error.
func HTTPCall(client *http.Client, url string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 400 {
			return policies.ErrorFrom(resp)
		}
		return nil
	}
}

// FleetClock is a scaled clock that several processes share: it counts from
// the same origin, so that workers started at different moments agree on
// the time, and scale seconds of it pass per wall-clock second.
func FleetClock(origin time.Time, scale float64) clock.Clock {
	return fleetClock{origin: origin, scale: scale}
}

type fleetClock struct {
	origin time.Time
	scale  float64
}

func (c fleetClock) wall(d time.Duration) time.Duration { return time.Duration(float64(d) / c.scale) }

func (c fleetClock) Now() time.Time {
	return c.origin.Add(time.Duration(float64(time.Since(c.origin)) * c.scale))
}

func (c fleetClock) Sleep(ctx context.Context, d time.Duration) error {
	return clock.Real().Sleep(ctx, c.wall(d))
}

func (c fleetClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return clock.Real().AfterFunc(c.wall(d), f)
}

func (c fleetClock) Until(deadline time.Time) time.Duration {
	return time.Duration(float64(time.Until(deadline)) * c.scale)
}
