package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/retrace-go/retrace/bench"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/telemetry"
)

// The fleet: eight workers call a provider that is down, 300 calls each, a
// second of fleet time apart; fleet time runs 1,000× faster than the wall
// clock, so the five minutes and their 60 s cool-downs take about a third
// of a second (the calls' own cost stretches the run a little).
const (
	fleetWorkers = 8
	fleetCalls   = 300
	fleetScale   = 1000.0
)

// fleet runs the fleet twice, with a breaker per worker and with one breaker
// shared by all: through a State in this process's memory, or, when
// REDIS_ADDR names a server, through Redis, by running contrib/redis's fleet
// command (the Redis client lives in that module, not in this one). In
// memory, each call of the shared run is a trace of its own, and
// -otlp-file gets every one.
func (d *demo) fleet(ctx context.Context) (result, error) {
	start := time.Now()
	var local, shared int64
	var span time.Duration             // the shared run's length in fleet time
	var traced []sdktrace.ReadOnlySpan // the roots of the shared run's calls, when this process ran it
	via := "memory"
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		via = "redis " + addr
		var err error
		if local, shared, span, err = fleetOverRedis(ctx, addr); err != nil {
			return result{}, err
		}
	} else {
		local, _ = runFleet(ctx, nil, nil)
		// The shared run is traced: each worker's call is a trace of its
		// own, and their leaf spans and retrace.calls add up to the
		// provider's requests.
		before := d.spans.rootCount()
		shared, span = runFleet(ctx, state.NewMemory(), []middleware.Option{middleware.WithTracerProvider(d.tp), middleware.WithMeterProvider(d.mp)})
		traced = d.spans.rootsSince(before)
	}
	// One probe per cool-down over the run, besides the threshold and the
	// calls in flight in the other workers when the breaker opened.
	bound := 5 + int64(span/time.Minute) + 1 + fleetWorkers - 1
	res := result{
		Scenario: "fleet", ProviderRequests: int(shared), Outcome: "rejected", WallMs: time.Since(start).Milliseconds(),
		Diagnosis: fmt.Sprintf("%d workers against a provider that is down: %d requests with a breaker each, %d with one shared breaker (%s)",
			fleetWorkers, local, shared, via),
		Details: map[string]any{"workers": fleetWorkers, "calls_per_worker": fleetCalls, "state": via,
			"local_downstream": local, "shared_downstream": shared},
	}
	for _, root := range traced {
		res.Calls += attrOf(root, telemetry.Calls).AsInt64()
		res.LeafSpans += leafSpans(d.spans.trace(root.SpanContext().TraceID()))
		res.traces = append(res.traces, root.SpanContext().TraceID())
	}
	if traced != nil {
		res.WorstCase = int64(fleetWorkers * fleetCalls * policies.ToolRetry.MaxAttempts)
		res.Problems = append(res.Problems, checkCounts(res)...)
	} else {
		res.untraced = "over Redis the fleet runs in contrib/redis's fleet command, a process of its own, whose spans this one never sees"
	}
	if shared > bound {
		res.Problems = append(res.Problems, fmt.Sprintf("the shared breaker let %d requests through, more than %d", shared, bound))
	}
	// Each local breaker pays its own threshold whatever the machine's
	// speed; how many cool-downs (and probes) the run spans depends on it,
	// and the bound above already counts them.
	if local < fleetWorkers*5 || local <= shared {
		res.Problems = append(res.Problems, fmt.Sprintf("local breakers (%d) should each pay their own 5 failures, more than the shared one (%d)", local, shared))
	}
	return res, nil
}

// runFleet runs the workers as goroutines on st (nil → a breaker each) and
// returns the requests the provider received and how long the run took in
// fleet time.
func runFleet(ctx context.Context, st state.State, opts []middleware.Option) (int64, time.Duration) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	origin := time.Now()
	clk := bench.FleetClock(origin, fleetScale)
	var wg sync.WaitGroup
	for i := range fleetWorkers {
		wg.Go(func() {
			// Workers are spread over one period, as a fleet's are.
			if clk.Sleep(ctx, time.Duration(i)*time.Second/fleetWorkers) != nil {
				return
			}
			bench.FleetWorker{Name: "provider", Calls: fleetCalls, Every: time.Second, State: st, Clock: clk, Options: opts,
				Call: bench.HTTPCall(srv.Client(), srv.URL)}.Run(ctx)
		})
	}
	wg.Wait()
	return n.Load(), clk.Now().Sub(origin)
}

// fleetOverRedis runs contrib/redis's fleet command against the server at
// addr and reads its JSON.
func fleetOverRedis(ctx context.Context, addr string) (local, shared int64, span time.Duration, err error) {
	cmd := exec.CommandContext(ctx, "go", "run", "-C", "contrib/redis", "./cmd/fleet", "-json", "-addr", addr,
		"-workers", fmt.Sprint(fleetWorkers), "-calls", fmt.Sprint(fleetCalls), "-time-scale", fmt.Sprint(1/fleetScale))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, 0, 0, fmt.Errorf("the fleet over Redis (run from the repository root): %w: %s", err, stderr.Bytes())
	}
	var out struct {
		Local  int64   `json:"local_downstream"`
		Shared int64   `json:"shared_downstream"`
		Span   float64 `json:"shared_fleet_seconds"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return 0, 0, 0, fmt.Errorf("the fleet command's report is not JSON: %w: %s", err, stdout.Bytes())
	}
	return out.Local, out.Shared, time.Duration(out.Span * float64(time.Second)), nil
}
