package engine

import (
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
)

// rateBreaker opens when half of at least 4 calls over 10 s failed; its
// FailureThreshold of 2 is overridden by the rate.
func rateBreaker(clk clock.Clock) *Breaker {
	return NewBreaker(BreakerLimits{FailureThreshold: 2, FailureRate: 0.5, MinimumCalls: 4, Window: 10 * time.Second,
		Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, Clock: clk})
}

func call(t *testing.T, b *Breaker, c Count) circuitbreaker.State {
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
	for i, c := range []Count{Fail, Fail, Ignore, Fail} {
		assert.Equal(t, circuitbreaker.ClosedState, call(t, b, c), "call %d", i+1)
	}
	assert.Equal(t, circuitbreaker.OpenState, call(t, b, Fail), "the fourth call that counts: 4 of 4 failed")
	e, f, s := b.Counts()
	assert.Equal(t, [3]uint{0, 0, 0}, [3]uint{e, f, s}, "counts restart at the transition")
}

func TestRateOpensAtTheRate(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := rateBreaker(clk)
	for i, c := range []Count{Success, Success, Fail, Success, Fail} {
		assert.Equal(t, circuitbreaker.ClosedState, call(t, b, c), "call %d: under half failed", i+1)
	}
	assert.Equal(t, circuitbreaker.OpenState, call(t, b, Fail), "3 of 6 failed")
}

func TestRateOldCallsLeaveTheWindow(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := rateBreaker(clk)
	for range 3 {
		call(t, b, Fail)
	}
	// Each second a success: the three failures stay in the window for
	// 10 s, and the rate (3 of 4, 3 of 5, …) would open it at the next
	// failure until they leave.
	for range 10 {
		clk.Advance(time.Second)
		require.Equal(t, circuitbreaker.ClosedState, call(t, b, Success))
	}
	// 10 s on, the failures' bucket has left: 10 successes then a failure
	// in a window of 11 calls, of which 9 successes are still in it.
	assert.Equal(t, circuitbreaker.ClosedState, call(t, b, Fail))
	clk.Advance(20 * time.Second)
	// Everything has left: 4 failures in 4 calls open it.
	for range 3 {
		require.Equal(t, circuitbreaker.ClosedState, call(t, b, Fail))
	}
	assert.Equal(t, circuitbreaker.OpenState, call(t, b, Fail))
}

func TestRateInsideTheWindowStillCounts(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := rateBreaker(clk)
	for range 3 {
		call(t, b, Fail)
	}
	clk.Advance(9 * time.Second)
	assert.Equal(t, circuitbreaker.OpenState, call(t, b, Fail), "the failures of 9 s ago are in the window")
}

func TestRateSuccessHeavyWindowStaysClosed(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := rateBreaker(clk)
	for i := range 300 {
		c := Success
		if i%5 >= 3 {
			c = Fail // the last 2 of every 5, past FailureThreshold
		}
		require.Equal(t, circuitbreaker.ClosedState, call(t, b, c), "call %d", i)
		clk.Advance(100 * time.Millisecond)
	}
}

func TestRateProbesAndClosesAsBefore(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := rateBreaker(clk)
	for range 4 {
		call(t, b, Fail)
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
	b.Record(probe, Fail, nil)
	require.Equal(t, circuitbreaker.OpenState, b.State(), "a failed probe reopens it")
	clk.Advance(time.Minute)
	probe, ok = b.Acquire(nil)
	require.True(t, ok)
	b.Record(probe, Success, nil)
	require.Equal(t, circuitbreaker.ClosedState, b.State(), "a successful probe closes it")
	// Closed again, the window starts empty: the failures of a minute
	// and a half ago were cleared at the transition, and 3 more are below
	// the minimum.
	for range 3 {
		require.Equal(t, circuitbreaker.ClosedState, call(t, b, Fail))
	}
	assert.Equal(t, circuitbreaker.OpenState, call(t, b, Fail))
}

func TestRateBucket(t *testing.T) {
	w := 10 * time.Second
	assert.Equal(t, RateBucket(epoch, w), RateBucket(epoch.Add(999*time.Millisecond), w), "buckets are Window/10 wide")
	assert.Equal(t, RateBucket(epoch, w)+1, RateBucket(epoch.Add(time.Second), w))
	assert.Equal(t, int64(-1), RateBucket(time.Unix(0, 0).Add(-time.Microsecond), w), "floor before the epoch")
	assert.Equal(t, RateBucket(epoch, time.Nanosecond)+1, RateBucket(epoch.Add(time.Microsecond), time.Nanosecond), "at least 1 µs wide")
	assert.False(t, RateOpens(0, 0, 0.5, 0), "an empty window never opens")
	assert.True(t, RateOpens(20, 10, 0.5, 20))
	assert.False(t, RateOpens(19, 19, 0.5, 20))
	assert.False(t, RateOpens(20, 9, 0.5, 20))
}
