package state_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/retrace-go/retrace/policies/state"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestRateBucket(t *testing.T) {
	w := 10 * time.Second
	assert.Equal(t, state.RateBucket(epoch, w), state.RateBucket(epoch.Add(999*time.Millisecond), w), "buckets are Window/10 wide")
	assert.Equal(t, state.RateBucket(epoch, w)+1, state.RateBucket(epoch.Add(time.Second), w))
	assert.Equal(t, int64(-1), state.RateBucket(time.Unix(0, 0).Add(-time.Microsecond), w), "floor before the epoch")
	assert.Equal(t, state.RateBucket(epoch, time.Nanosecond)+1, state.RateBucket(epoch.Add(time.Microsecond), time.Nanosecond), "at least 1 µs wide")
	assert.False(t, state.RateOpens(0, 0, 0.5, 0), "an empty window never opens")
	assert.True(t, state.RateOpens(20, 10, 0.5, 20))
	assert.False(t, state.RateOpens(19, 19, 0.5, 20))
	assert.False(t, state.RateOpens(20, 9, 0.5, 20))
}

func TestRatioWindow(t *testing.T) {
	w := 10 * time.Second
	idx, into := state.RatioWindow(epoch.Add(15*time.Second), w)
	next, _ := state.RatioWindow(epoch.Add(20*time.Second), w)
	assert.Equal(t, idx+1, next)
	assert.InDelta(t, 0.5, into, 1e-9, "15 s is half into the window that began at 10 s")
	assert.True(t, state.RatioAllows(0, 1, 0.1, 2), "the minimum allows 2 retries without calls")
	assert.False(t, state.RatioAllows(0, 2, 0.1, 2))
	assert.True(t, state.RatioAllows(100, 9, 0.1, 2), "10 of 100 calls")
	assert.False(t, state.RatioAllows(100, 10, 0.1, 2))
}

type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }

func TestDegradedType(t *testing.T) {
	assert.Equal(t, "timeout", state.DegradedType(fmt.Errorf("redis: %w", context.DeadlineExceeded)))
	assert.Equal(t, "timeout", state.DegradedType(fmt.Errorf("dial: %w", timeoutErr{})))
	assert.Equal(t, "unavailable", state.DegradedType(errors.New("connection refused")))
}

func TestUseMerge(t *testing.T) {
	down := errors.New("down")
	none := state.Use{}
	shared := state.Use{Policy: state.PolicyBudget, Shared: true}
	degraded := state.Use{Policy: state.PolicyBreaker, Degraded: down}
	assert.Equal(t, shared, none.Merge(shared), "a policy with state says more than none")
	assert.Equal(t, shared, shared.Merge(none))
	assert.Equal(t, degraded, shared.Merge(degraded), "a degraded state says more than a healthy one")
	assert.Equal(t, degraded, degraded.Merge(shared))
}
