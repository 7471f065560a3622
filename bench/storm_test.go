package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStormIsDeterministic(t *testing.T) {
	for _, s := range Strategies {
		a, b := Simulate(DefaultStorm(100, s)), Simulate(DefaultStorm(100, s))
		assert.Equal(t, a, b, "%s: the same seed gives the same storm", s)
	}
	other := DefaultStorm(100, Jitter)
	other.Seed = 2
	assert.NotEqual(t, Simulate(DefaultStorm(100, Jitter)).Series, Simulate(other).Series, "another seed, another storm")
}

func TestStormShapes(t *testing.T) {
	for _, n := range []int{5, 100} {
		res := map[Strategy]StormResult{}
		for _, s := range Strategies {
			res[s] = Simulate(DefaultStorm(n, s))
			r := res[s]
			t.Logf("%3d clients, %-16s peak %3d/100ms, %5d downstream calls, %.2f per logical call, %3d/%3d succeeded, all done at %s",
				n, s, r.Peak, r.DownstreamCalls, r.CallsPerLogical(), r.Succeeded, r.LogicalCalls, r.Finish)
			require.Equal(t, n*5, r.LogicalCalls)
			sum := 0
			for _, x := range r.Series {
				sum += x
			}
			assert.Equal(t, r.DownstreamCalls, sum, "the series counts every request")
		}
		// Without jitter the whole herd retries in the same window.
		assert.Equal(t, n, res[NoJitter].Peak)
		if n == 100 {
			// The claim, at 100 clients: jitter cuts the peak by at least half.
			assert.LessOrEqual(t, res[Jitter].Peak*2, res[NoJitter].Peak, "jitter must cut the peak by ≥ 50%%")
		}
		// A budget of 6 retries per task caps each client's retries.
		assert.LessOrEqual(t, res[JitterBudget].DownstreamCalls, n*(5+6))
		assert.Less(t, res[JitterBudget].CallsPerLogical(), res[Jitter].CallsPerLogical())
		// A breaker shields the downstream while it is down.
		assert.Less(t, res[JitterBreaker].DownstreamCalls, res[Jitter].DownstreamCalls)
	}
}

// A fleet sharing its breakers and budgets puts a fraction of the load of
// one whose workers each keep their own on the provider while it is down.
func TestFleetStorm(t *testing.T) {
	for _, n := range []int{100, 1000} {
		local, shared := Simulate(FleetStorm(n, LocalFleet)), Simulate(FleetStorm(n, SharedFleet))
		during := func(r StormResult) int {
			sum := 0
			for w, x := range r.Series {
				if time.Duration(w)*Window < FleetStorm(n, LocalFleet).Outage {
					sum += x
				}
			}
			return sum
		}
		t.Logf("%4d workers: local peak %d, %d requests (%d during the outage); shared peak %d, %d requests (%d during the outage)",
			n, local.Peak, local.DownstreamCalls, during(local), shared.Peak, shared.DownstreamCalls, during(shared))
		require.Equal(t, n*300, local.LogicalCalls)
		require.Equal(t, n*300, shared.LogicalCalls)
		// Each local breaker costs its worker 5 failures: the fleet's cost
		// grows with n; the shared one's does not.
		assert.GreaterOrEqual(t, during(local), 5*n)
		assert.Less(t, during(shared)*4, during(local))
		assert.Equal(t, Simulate(FleetStorm(n, SharedFleet)), shared, "deterministic")

		// A shared breaker on the failure rate shields the provider during
		// the outage as the shared count does: it opens once 20 calls are
		// in the window, a count of calls that does not grow with n.
		rate := Simulate(FleetStorm(n, SharedRateFleet))
		t.Logf("%4d workers: rate peak %d, %d requests (%d during the outage), %d succeeded (local %d, shared %d)",
			n, rate.Peak, rate.DownstreamCalls, during(rate), rate.Succeeded, local.Succeeded, shared.Succeeded)
		require.Equal(t, n*300, rate.LogicalCalls)
		assert.Less(t, during(rate)*4, during(local))
		assert.LessOrEqual(t, during(rate), 20+2, "20 failures fill the window and open it; then a probe per 60 s cool-down")
		// In this storm it does not rescue the fleet: the workers whose
		// first calls the shared budget ended at t = 0 call in step, in a
		// window the provider refuses most of (see TestFleetStormSpread).
		assert.Less(t, rate.Succeeded*10, local.Succeeded)
		assert.Equal(t, Simulate(FleetStorm(n, SharedRateFleet)), rate, "deterministic")
	}
}

// With the workers' pauses jittered, what the results page says of the
// spread storm holds: the shared count still sheds nearly every call, the
// shared rate succeeds about as often as local breakers, and the provider
// gets a fraction of the local breakers' requests during the outage.
func TestFleetStormSpread(t *testing.T) {
	for _, n := range []int{100, 1000} {
		local, shared, rate := Simulate(FleetStormSpread(n, LocalFleet)), Simulate(FleetStormSpread(n, SharedFleet)), Simulate(FleetStormSpread(n, SharedRateFleet))
		outage := FleetStormSpread(n, LocalFleet).Outage
		during := func(r StormResult) int {
			sum := 0
			for w, x := range r.Series {
				if time.Duration(w)*Window < outage {
					sum += x
				}
			}
			return sum
		}
		t.Logf("%4d workers, pauses jittered: succeeded local %d, shared %d, rate %d; during the outage %d, %d, %d",
			n, local.Succeeded, shared.Succeeded, rate.Succeeded, during(local), during(shared), during(rate))
		require.Equal(t, n*300, rate.LogicalCalls)
		assert.Less(t, shared.Succeeded*10, local.Succeeded, "the shared count sheds most calls")
		assert.InEpsilon(t, local.Succeeded, rate.Succeeded, 0.1, "the shared rate succeeds about as often as local breakers")
		assert.Less(t, during(rate)*4, during(local))
		assert.NotEqual(t, Simulate(FleetStorm(n, SharedRateFleet)).Series, rate.Series, "the jitter changes the storm")
		assert.Equal(t, Simulate(FleetStormSpread(n, SharedRateFleet)), rate, "deterministic")
	}
}

// A fleet worker with Rate breaks on RateBreaker's failure rate, on its
// other settings.
func TestFleetWorkerRate(t *testing.T) {
	w := FleetWorker{Name: "p", Rate: true}
	cfg := w.breaker()
	assert.Equal(t, "p", cfg.Name)
	assert.InDelta(t, 0.5, cfg.FailureRate, 0)
	assert.Equal(t, 20, cfg.MinimumCalls)
	assert.Equal(t, 10*time.Second, cfg.Window)
	assert.Zero(t, FleetWorker{Name: "p"}.breaker().FailureRate, "without Rate, the presets")
}
