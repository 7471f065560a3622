package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrace-go/retrace/bench"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/telemetry"
)

// The state-down scenario: the fleet's task during the outage, with the
// store its workers share (Redis, in production) down as well.
const (
	stateDownCalls  = 20 // calls per worker
	stateDownBudget = 6  // retries for the whole task, all workers together
)

// errStateDown is what every step of the store that is down answers, as a
// client answers when the server refuses the connection.
var errStateDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// downState is a shared State that cannot be reached: every step fails at
// once, as a store client's does when its server refuses connections.
type downState struct{ steps atomic.Int64 }

func (s *downState) Breaker(context.Context, string, state.BreakerOp) (state.BreakerView, error) {
	s.steps.Add(1)
	return state.BreakerView{}, errStateDown
}

func (s *downState) Draw(context.Context, string, int64, time.Duration) (state.DrawView, error) {
	s.steps.Add(1)
	return state.DrawView{}, errStateDown
}

func (s *downState) Ratio(context.Context, string, state.RatioOp) (state.RatioView, error) {
	s.steps.Add(1)
	return state.RatioView{}, errStateDown
}

// stateDown runs one task on the fleet's eight workers against the provider
// that is down, with the breaker and the task's budget of retries shared
// through a State that is down too: every decision of theirs is made on
// the worker's local state instead (a retrace.state.degraded event, and
// the metric of the same name), and once the task's retries are spent the
// budget refuses the rest (outcome budget_exhausted). Each call is a trace
// of its own.
func (d *demo) stateDown(ctx context.Context) (result, error) {
	start := time.Now()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	st := &downState{}
	tctx := policies.WithSharedTaskBudget(ctx, st, "state-down", stateDownBudget)
	clk := bench.FleetClock(time.Now(), fleetScale)
	opts := []middleware.Option{middleware.WithTracerProvider(d.tp), middleware.WithMeterProvider(d.mp)}
	before := d.spans.rootCount()
	var mu sync.Mutex
	outcomes := bench.FleetOutcomes{}
	var wg sync.WaitGroup
	for i := range fleetWorkers {
		wg.Go(func() {
			if clk.Sleep(ctx, time.Duration(i)*time.Second/fleetWorkers) != nil {
				return
			}
			o := bench.FleetWorker{Name: "provider", Calls: stateDownCalls, Every: time.Second, State: st, Clock: clk, Options: opts,
				Call: bench.HTTPCall(srv.Client(), srv.URL)}.Run(tctx)
			mu.Lock()
			defer mu.Unlock()
			for k, v := range o {
				outcomes[k] += v
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	budget := policies.TaskBudgetFrom(tctx)
	res := result{
		Scenario: "state-down", ProviderRequests: int(requests.Load()), Outcome: string(telemetry.OutcomeBudgetExhausted),
		WallMs: time.Since(start).Milliseconds(),
		Diagnosis: fmt.Sprintf("the shared state is down: %d steps on it failed and its breaker and budget decided locally; the task's %d retries were spent and %d more refused",
			st.steps.Load(), budget.Used(), budget.Denied()),
		Details: map[string]any{"workers": fleetWorkers, "calls_per_worker": stateDownCalls, "outcomes": outcomes,
			"retries_used": budget.Used(), "retries_refused": budget.Denied(), "state_steps_failed": st.steps.Load()},
		WorstCase: int64(fleetWorkers * stateDownCalls * policies.ToolRetry.MaxAttempts),
	}
	degraded := 0
	for _, root := range d.spans.rootsSince(before) {
		res.Calls += attrOf(root, telemetry.Calls).AsInt64()
		spans := d.spans.trace(root.SpanContext().TraceID())
		res.LeafSpans += leafSpans(spans)
		res.traces = append(res.traces, root.SpanContext().TraceID())
		for _, s := range spans {
			for _, e := range s.Events() {
				if e.Name == telemetry.EventStateDegraded {
					degraded++
				}
			}
		}
	}
	res.Details["degraded_events"] = degraded
	res.Problems = checkCounts(res)
	if degraded == 0 || st.steps.Load() == 0 {
		res.Problems = append(res.Problems, "want the decisions made locally, as degraded, while the shared state is down")
	}
	if budget.Used() != stateDownBudget || budget.Denied() == 0 || outcomes[string(telemetry.OutcomeBudgetExhausted)] == 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("want the task's %d retries spent and later ones refused, got %d used, %d refused, outcomes %v",
			stateDownBudget, budget.Used(), budget.Denied(), outcomes))
	}
	return res, nil
}
