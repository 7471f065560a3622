package engine

import (
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/policies/state"
)

var epoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func breaker(clk clock.Clock) *Breaker {
	return NewBreaker(BreakerLimits{FailureThreshold: 2, Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, Clock: clk})
}

// A call admitted while closed that ends while the breaker is half open is
// not the probe: it neither frees the probe's slot nor closes the breaker.
func TestPermitKnowsItsState(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := breaker(clk)
	slow, ok := b.Acquire(nil) // admitted while closed, still running
	require.True(t, ok)
	assert.False(t, slow.Probe())
	for range 2 {
		p, ok := b.Acquire(nil)
		require.True(t, ok)
		b.Record(p, state.Fail, nil)
	}
	require.Equal(t, circuitbreaker.OpenState, b.State())
	clk.Advance(time.Minute)
	probe, ok := b.Acquire(nil)
	require.True(t, ok)
	require.True(t, probe.Probe())
	require.Equal(t, circuitbreaker.HalfOpenState, b.State())

	b.Record(slow, state.Success, nil) // the slow call from before the outage ends well
	assert.Equal(t, circuitbreaker.HalfOpenState, b.State(), "the slow call did not close the breaker")
	_, second := b.Acquire(nil)
	assert.False(t, second, "the probe's slot is still the probe's: no second probe in flight")

	b.Record(probe, state.Success, nil)
	assert.Equal(t, circuitbreaker.ClosedState, b.State(), "the probe closes it")
}

// A failure admitted before the breaker opened does not reopen it after a
// later transition either.
func TestStaleFailureIsIgnored(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := breaker(clk)
	stale, _ := b.Acquire(nil)
	b.Set(circuitbreaker.OpenState, nil)
	b.Set(circuitbreaker.ClosedState, nil)
	b.Record(stale, state.Fail, nil)
	e, f, _ := b.Counts()
	assert.Zero(t, e)
	assert.Zero(t, f)
}

// The breaker's cool-down runs on the caller's clock when it has none of
// its own.
func TestBreakerTakesTheCallersClock(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := NewBreaker(BreakerLimits{FailureThreshold: 1, Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1})
	p, _ := b.Acquire(clk)
	b.Record(p, state.Fail, clk)
	assert.Equal(t, time.Minute, b.Remaining(clk))
	clk.Advance(59 * time.Second)
	_, ok := b.Acquire(clk)
	assert.False(t, ok)
	clk.Advance(time.Second)
	_, ok = b.Acquire(clk)
	assert.True(t, ok)
}

// A local probe whose end is never recorded (a call that hangs) holds the
// half-open slot for its lease only.
func TestLocalProbeLease(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	b := NewBreaker(BreakerLimits{FailureThreshold: 1, Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, ProbeLease: 10 * time.Second})
	p, ok := b.Acquire(clk)
	require.True(t, ok)
	require.NoError(t, b.Record(p, state.Fail, clk))
	clk.Advance(time.Minute)
	lost, ok := b.Acquire(clk)
	require.True(t, ok)
	require.True(t, lost.Probe())
	clk.Advance(9 * time.Second)
	_, ok = b.Acquire(clk)
	require.False(t, ok, "the probe's lease has not passed")
	clk.Advance(time.Second)
	probe, ok := b.Acquire(clk)
	require.True(t, ok, "a lost probe must not hold the breaker half open")
	require.NoError(t, b.Record(lost, state.Fail, clk))
	require.Equal(t, circuitbreaker.HalfOpenState, b.State(), "the lost probe's late end is stale")
	require.NoError(t, b.Record(probe, state.Success, clk))
	require.Equal(t, circuitbreaker.ClosedState, b.State())
}
