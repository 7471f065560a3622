package policies_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
)

func TestBreakerRateDefaults(t *testing.T) {
	cfg := policies.NewCircuitBreaker[any](policies.BreakerConfig{FailureRate: 0.5}).Config()
	assert.Equal(t, 20, cfg.MinimumCalls)
	assert.Equal(t, 10*time.Second, cfg.Window)
	assert.InDelta(t, 1, policies.NewCircuitBreaker[any](policies.BreakerConfig{FailureRate: 3}).Config().FailureRate, 0, "above 1 → 1")
	for _, off := range []float64{0, -1, math.NaN()} {
		cfg = policies.NewCircuitBreaker[any](policies.BreakerConfig{FailureRate: off}).Config()
		assert.Zero(t, cfg.FailureRate, "%v is off", off)
		assert.Zero(t, cfg.MinimumCalls, "no rate, no minimum")
		assert.Zero(t, cfg.Window)
		assert.Equal(t, 5, cfg.FailureThreshold, "the preset is unchanged")
	}
}

// Two workers share one window: one's failures and the other's successes
// make the fleet's rate.
func TestSharedBreakerRateCountsTheFleet(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	st := state.NewMemory()
	cfg := policies.BreakerConfig{Name: "p", FailureRate: 0.5, MinimumCalls: 20, Clock: clk, State: st}
	failing, healthy := policies.NewCircuitBreaker[any](cfg), policies.NewCircuitBreaker[any](cfg)
	for i := range 10 {
		require.True(t, failing.TryAcquirePermit())
		failing.RecordFailure()
		require.True(t, healthy.TryAcquirePermit())
		healthy.RecordSuccess()
		require.True(t, failing.IsClosed(), "call %d: half the fleet's calls failed, but it holds fewer than 20", 2*i+2)
	}
	require.True(t, failing.TryAcquirePermit())
	failing.RecordFailure()
	assert.True(t, failing.IsOpen(), "11 of 21 of the fleet's calls failed")
	assert.False(t, healthy.TryAcquirePermit(), "open for everyone")
}
