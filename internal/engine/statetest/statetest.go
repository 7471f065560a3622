// Package statetest holds the rules every engine.State implementation keeps,
// as tests that each implementation runs against itself: the in-memory one
// in package engine, the Redis one in contrib/redis.
package statetest

import (
	"context"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/internal/engine"
)

// Run runs the rules against the states newState returns, a fresh one per
// test.
func Run(t *testing.T, newState func(t *testing.T) engine.State) {
	t.Run("breaker opens after the threshold, probes once, closes", func(t *testing.T) {
		breakerCycle(t, newState(t))
	})
	t.Run("breaker ignores a stale permit", func(t *testing.T) {
		staleRecord(t, newState(t))
	})
	t.Run("breaker record current and set", func(t *testing.T) {
		currentAndSet(t, newState(t))
	})
	t.Run("draw stops at the limit", func(t *testing.T) {
		draws(t, newState(t))
	})
	t.Run("ratio allows the minimum, then the ratio of calls", func(t *testing.T) {
		ratio(t, newState(t))
	})
	t.Run("keys are separate", func(t *testing.T) {
		separateKeys(t, newState(t))
	})
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func op(kind engine.BreakerOpKind, now time.Time) engine.BreakerOp {
	return engine.BreakerOp{Kind: kind, Now: now, FailureThreshold: 3, Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, TTL: time.Hour}
}

func step(t *testing.T, s engine.State, key string, o engine.BreakerOp) engine.BreakerView {
	t.Helper()
	v, err := s.Breaker(context.Background(), key, o)
	require.NoError(t, err)
	return v
}

func record(t *testing.T, s engine.State, key string, now time.Time, p engine.BreakerView, c engine.Count) engine.BreakerView {
	t.Helper()
	o := op(engine.BreakerRecord, now)
	o.Gen, o.Probe, o.Count = p.Gen, p.Probe, c
	return step(t, s, key, o)
}

func breakerCycle(t *testing.T, s engine.State) {
	const key = "breaker:a"
	// Three workers' failures count toward one threshold.
	var last engine.BreakerView
	for i := range 3 {
		p := step(t, s, key, op(engine.BreakerAcquire, t0))
		require.True(t, p.Granted, "call %d", i)
		require.False(t, p.Probe)
		last = record(t, s, key, t0, p, engine.Fail)
	}
	require.Equal(t, circuitbreaker.OpenState, last.State)
	require.True(t, last.Changed)
	require.Equal(t, circuitbreaker.ClosedState, last.From)
	require.Equal(t, t0.UnixMicro(), last.OpenedAt.UnixMicro())
	require.EqualValues(t, 1, last.Gen)

	// Open: refused until the cool-down has passed.
	v := step(t, s, key, op(engine.BreakerAcquire, t0.Add(59*time.Second)))
	require.False(t, v.Granted)
	require.Equal(t, circuitbreaker.OpenState, v.State)

	// Then one probe, for everyone.
	probe := step(t, s, key, op(engine.BreakerAcquire, t0.Add(time.Minute)))
	require.True(t, probe.Granted)
	require.True(t, probe.Probe)
	require.Equal(t, circuitbreaker.HalfOpenState, probe.State)
	require.True(t, probe.Changed)
	second := step(t, s, key, op(engine.BreakerAcquire, t0.Add(time.Minute)))
	require.False(t, second.Granted, "a second probe in the same cool-down")

	// A failed probe reopens it; the next cool-down gives one more probe.
	v = record(t, s, key, t0.Add(time.Minute), probe, engine.Fail)
	require.Equal(t, circuitbreaker.OpenState, v.State)
	require.Equal(t, circuitbreaker.HalfOpenState, v.From)
	probe = step(t, s, key, op(engine.BreakerAcquire, t0.Add(2*time.Minute)))
	require.True(t, probe.Probe)

	// A successful probe closes it for everyone.
	v = record(t, s, key, t0.Add(2*time.Minute), probe, engine.Success)
	require.Equal(t, circuitbreaker.ClosedState, v.State)
	require.True(t, v.Changed)
	v = step(t, s, key, op(engine.BreakerAcquire, t0.Add(2*time.Minute)))
	require.True(t, v.Granted)
	require.False(t, v.Probe)

	// A success resets the consecutive count.
	for range 2 {
		record(t, s, key, t0, step(t, s, key, op(engine.BreakerAcquire, t0)), engine.Fail)
	}
	record(t, s, key, t0, step(t, s, key, op(engine.BreakerAcquire, t0)), engine.Success)
	v = record(t, s, key, t0, step(t, s, key, op(engine.BreakerAcquire, t0)), engine.Fail)
	require.Equal(t, circuitbreaker.ClosedState, v.State)
	require.EqualValues(t, 4, v.Executions)
	require.EqualValues(t, 3, v.Failures)
	require.EqualValues(t, 1, v.Successes)
}

func staleRecord(t *testing.T, s engine.State) {
	const key = "breaker:stale"
	early := step(t, s, key, op(engine.BreakerAcquire, t0)) // granted while closed, gen 0
	for range 3 {
		record(t, s, key, t0, step(t, s, key, op(engine.BreakerAcquire, t0)), engine.Fail)
	}
	probe := step(t, s, key, op(engine.BreakerAcquire, t0.Add(time.Minute)))
	require.True(t, probe.Probe)
	// The early call ends now: it neither frees the probe slot nor closes it.
	v := record(t, s, key, t0.Add(time.Minute), early, engine.Success)
	require.Equal(t, circuitbreaker.HalfOpenState, v.State)
	require.False(t, v.Changed)
	require.False(t, step(t, s, key, op(engine.BreakerAcquire, t0.Add(time.Minute))).Granted)
}

func currentAndSet(t *testing.T, s engine.State) {
	const key = "breaker:current"
	o := op(engine.BreakerSet, t0)
	o.To = circuitbreaker.OpenState
	v := step(t, s, key, o)
	require.Equal(t, circuitbreaker.OpenState, v.State)
	probe := step(t, s, key, op(engine.BreakerAcquire, t0.Add(time.Minute)))
	require.True(t, probe.Probe)
	// A call without a permit frees the probe slot and counts now.
	c := op(engine.BreakerRecordCurrent, t0.Add(time.Minute))
	c.Count = engine.Success
	v = step(t, s, key, c)
	require.Equal(t, circuitbreaker.ClosedState, v.State)
	o.To = circuitbreaker.ClosedState
	v = step(t, s, key, o)
	require.False(t, v.Changed, "already closed")
}

func draws(t *testing.T, s engine.State) {
	ctx := context.Background()
	for i := range 3 {
		v, err := s.Draw(ctx, "task:t1", 3, time.Hour)
		require.NoError(t, err)
		require.True(t, v.OK)
		require.EqualValues(t, i+1, v.Used)
	}
	v, err := s.Draw(ctx, "task:t1", 3, time.Hour)
	require.NoError(t, err)
	require.False(t, v.OK)
	require.EqualValues(t, 3, v.Used)
}

func ratio(t *testing.T, s engine.State) {
	ctx := context.Background()
	at := t0.Truncate(10 * time.Second)
	o := engine.RatioOp{Now: at, Window: 10 * time.Second, Ratio: 0.5, MinRetries: 2}
	try := func(retry bool) engine.RatioView {
		t.Helper()
		o.Retry = retry
		v, err := s.Ratio(ctx, "retry:r", o)
		require.NoError(t, err)
		return v
	}
	require.True(t, try(true).OK)
	require.True(t, try(true).OK)
	require.False(t, try(true).OK, "past the minimum with no calls")
	for range 10 {
		require.True(t, try(false).OK)
	}
	// 10 calls allow 5 retries over the window; 2 are taken.
	for range 3 {
		require.True(t, try(true).OK)
	}
	v := try(true)
	require.False(t, v.OK)
	require.InDelta(t, 10, v.Calls, 1e-9)
	require.InDelta(t, 5, v.Retries, 1e-9)

	// Half a window later, the previous window counts half.
	o.Now = at.Add(15 * time.Second)
	v = try(false)
	require.InDelta(t, 6, v.Calls, 1e-9) // 10 × 0.5 + this one
	require.InDelta(t, 2.5, v.Retries, 1e-9)
	require.False(t, try(true).OK, "2.5 + 1 retries > 0.5 × 6 calls")
	try(false)
	require.True(t, try(true).OK, "2.5 + 1 retries ≤ 0.5 × 7 calls")
	// Two windows on, nothing counts.
	o.Now = at.Add(40 * time.Second)
	v = try(false)
	require.InDelta(t, 1, v.Calls, 1e-9)
	require.InDelta(t, 0, v.Retries, 1e-9)
}

func separateKeys(t *testing.T, s engine.State) {
	for range 3 {
		record(t, s, "breaker:x", t0, step(t, s, "breaker:x", op(engine.BreakerAcquire, t0)), engine.Fail)
	}
	require.False(t, step(t, s, "breaker:x", op(engine.BreakerAcquire, t0)).Granted)
	require.True(t, step(t, s, "breaker:y", op(engine.BreakerAcquire, t0)).Granted)
	v, err := s.Draw(context.Background(), "task:other", 1, time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, v.Used)
}
