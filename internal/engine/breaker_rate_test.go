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

// rateBreaker opens when half of at least 4 calls over 10 s failed; its
// FailureThreshold of 2 is overridden by the rate.
func rateBreaker(clk clock.Clock) *Breaker {
	return NewBreaker(BreakerLimits{FailureThreshold: 2, FailureRate: 0.5, MinimumCalls: 4, Window: 10 * time.Second,
		Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, Clock: clk})
}

func call(t *testing.T, b *Breaker, c state.Count) circuitbreaker.State {
	t.Helper()
	p, ok := b.Acquire(nil)
	require.True(t, ok, "the breaker refused the call")
	b.Record(p, c, nil)
	return b.State()
}

func TestRateOpensOnlyOnceTheWindowHoldsTheMinimum(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := rateBreaker(clk)
	// 2 and 3 failures in a row, past FailureThreshold, all the calls
	// there are: below the minimum, it stays closed.
	for i, c := range []state.Count{state.Fail, state.Fail, state.Ignore, state.Fail} {
		assert.Equal(t, circuitbreaker.ClosedState, call(t, b, c), "call %d", i+1)
	}
	assert.Equal(t, circuitbreaker.OpenState, call(t, b, state.Fail), "the fourth call that counts: 4 of 4 failed")
	e, f, s := b.Counts()
	assert.Equal(t, [3]uint{0, 0, 0}, [3]uint{e, f, s}, "counts restart at the transition")
}

func TestRateOpensAtTheRate(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := rateBreaker(clk)
	for i, c := range []state.Count{state.Success, state.Success, state.Fail, state.Success, state.Fail} {
		assert.Equal(t, circuitbreaker.ClosedState, call(t, b, c), "call %d: under half failed", i+1)
	}
	assert.Equal(t, circuitbreaker.OpenState, call(t, b, state.Fail), "3 of 6 failed")
}

func TestRateOldCallsLeaveTheWindow(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := rateBreaker(clk)
	for range 3 {
		call(t, b, state.Fail)
	}
	// Each second a success: the three failures stay in the window for
	// 10 s, and the rate (3 of 4, 3 of 5, …) would open it at the next
	// failure until they leave.
	for range 10 {
		clk.Advance(time.Second)
		require.Equal(t, circuitbreaker.ClosedState, call(t, b, state.Success))
	}
	// 10 s on, the failures' bucket has left: 10 successes then a failure
	// in a window of 11 calls, of which 9 successes are still in it.
	assert.Equal(t, circuitbreaker.ClosedState, call(t, b, state.Fail))
	clk.Advance(20 * time.Second)
	// Everything has left: 4 failures in 4 calls open it.
	for range 3 {
		require.Equal(t, circuitbreaker.ClosedState, call(t, b, state.Fail))
	}
	assert.Equal(t, circuitbreaker.OpenState, call(t, b, state.Fail))
}

func TestRateInsideTheWindowStillCounts(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := rateBreaker(clk)
	for range 3 {
		call(t, b, state.Fail)
	}
	clk.Advance(9 * time.Second)
	assert.Equal(t, circuitbreaker.OpenState, call(t, b, state.Fail), "the failures of 9 s ago are in the window")
}

func TestRateSuccessHeavyWindowStaysClosed(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := rateBreaker(clk)
	for i := range 300 {
		c := state.Success
		if i%5 >= 3 {
			c = state.Fail // the last 2 of every 5, past FailureThreshold
		}
		require.Equal(t, circuitbreaker.ClosedState, call(t, b, c), "call %d", i)
		clk.Advance(100 * time.Millisecond)
	}
}

func TestRateProbesAndClosesAsBefore(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := rateBreaker(clk)
	for range 4 {
		call(t, b, state.Fail)
	}
	require.Equal(t, circuitbreaker.OpenState, b.State())
	clk.Advance(59 * time.Second)
	_, ok := b.Acquire(nil)
	assert.False(t, ok, "open during the cool-down")
	assert.Equal(t, time.Second, b.Remaining(nil))
	clk.Advance(time.Second)
	probe, ok := b.Acquire(nil)
	require.True(t, ok)
	require.True(t, probe.Probe())
	_, second := b.Acquire(nil)
	assert.False(t, second, "one probe at a time")
	b.Record(probe, state.Fail, nil)
	require.Equal(t, circuitbreaker.OpenState, b.State(), "a failed probe reopens it")
	clk.Advance(time.Minute)
	probe, ok = b.Acquire(nil)
	require.True(t, ok)
	b.Record(probe, state.Success, nil)
	require.Equal(t, circuitbreaker.ClosedState, b.State(), "a successful probe closes it")
	// Closed again, the window starts empty: the failures of a minute
	// and a half ago were cleared at the transition, and 3 more are below
	// the minimum.
	for range 3 {
		require.Equal(t, circuitbreaker.ClosedState, call(t, b, state.Fail))
	}
	assert.Equal(t, circuitbreaker.OpenState, call(t, b, state.Fail))
}
