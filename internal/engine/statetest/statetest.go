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
	t.Run("breaker opens on the failure rate once the window holds the minimum", func(t *testing.T) {
		rateMinimum(t, newState(t))
	})
	t.Run("breaker rate: old calls leave the window", func(t *testing.T) {
		rateWindowSlides(t, newState(t))
	})
	t.Run("breaker rate: a success-heavy window stays closed", func(t *testing.T) {
		rateSuccessHeavy(t, newState(t))
	})
	t.Run("a lost probe's slot is taken again after its lease", func(t *testing.T) {
		probeLease(t, newState(t))
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

// rateOp is op in failure-rate mode: half of at least 4 calls over 10 s,
// with a FailureThreshold of 2 that the rate overrides.
func rateOp(kind engine.BreakerOpKind, now time.Time) engine.BreakerOp {
	o := op(kind, now)
	o.FailureThreshold, o.FailureRate, o.MinimumCalls, o.Window = 2, 0.5, 4, 10*time.Second
	return o
}

// rateCall makes one call through the shared breaker at now, ending with c.
func rateCall(t *testing.T, s engine.State, key string, now time.Time, c engine.Count) engine.BreakerView {
	t.Helper()
	p := step(t, s, key, rateOp(engine.BreakerAcquire, now))
	require.True(t, p.Granted, "refused at %s", now)
	o := rateOp(engine.BreakerRecord, now)
	o.Gen, o.Probe, o.Count = p.Gen, p.Probe, c
	return step(t, s, key, o)
}

func rateMinimum(t *testing.T, s engine.State) {
	const key = "breaker:rate"
	at := t0.Truncate(10 * time.Second)
	// Workers' calls count toward one window: below the minimum no rate
	// opens it, nor do consecutive failures past FailureThreshold.
	rateCall(t, s, key, at, engine.Success)
	for i, c := range []engine.Count{engine.Fail, engine.Fail, engine.Ignore, engine.Success} {
		v := rateCall(t, s, key, at.Add(time.Duration(i)*time.Second), c)
		require.Equal(t, circuitbreaker.ClosedState, v.State, "call %d", i+2)
	}
	// 5 calls (the ignored one is none), 3 failed: at least half.
	v := rateCall(t, s, key, at.Add(4*time.Second), engine.Fail)
	require.Equal(t, circuitbreaker.OpenState, v.State)
	require.True(t, v.Changed)
	require.Equal(t, at.Add(4*time.Second).UnixMicro(), v.OpenedAt.UnixMicro())

	// Probe and close as with a count.
	require.False(t, step(t, s, key, rateOp(engine.BreakerAcquire, at.Add(63*time.Second))).Granted)
	probe := step(t, s, key, rateOp(engine.BreakerAcquire, at.Add(64*time.Second)))
	require.True(t, probe.Probe)
	o := rateOp(engine.BreakerRecord, at.Add(64*time.Second))
	o.Gen, o.Probe, o.Count = probe.Gen, probe.Probe, engine.Fail
	require.Equal(t, circuitbreaker.OpenState, step(t, s, key, o).State, "a failed probe reopens it")
	probe = step(t, s, key, rateOp(engine.BreakerAcquire, at.Add(124*time.Second)))
	require.True(t, probe.Probe)
	o = rateOp(engine.BreakerRecord, at.Add(124*time.Second))
	o.Gen, o.Probe, o.Count = probe.Gen, probe.Probe, engine.Success
	require.Equal(t, circuitbreaker.ClosedState, step(t, s, key, o).State)

	// Closed again, the window starts empty: the failures before the
	// outage, still within 10 s of a bucket, do not count.
	for i := range 3 {
		v = rateCall(t, s, key, at.Add(124*time.Second), engine.Fail)
		require.Equal(t, circuitbreaker.ClosedState, v.State, "failure %d after closing", i+1)
	}
	v = rateCall(t, s, key, at.Add(124*time.Second), engine.Fail)
	require.Equal(t, circuitbreaker.OpenState, v.State)
}

func rateWindowSlides(t *testing.T, s engine.State) {
	at := t0.Truncate(10 * time.Second)
	for _, key := range []string{"breaker:gone", "breaker:kept"} {
		for range 3 {
			require.Equal(t, circuitbreaker.ClosedState, rateCall(t, s, key, at, engine.Fail).State)
		}
	}
	// 9 s on, the first second's bucket is still in the window: 4 of 4.
	require.Equal(t, circuitbreaker.OpenState, rateCall(t, s, "breaker:kept", at.Add(9*time.Second), engine.Fail).State)
	// 11 s on, it has left (its bucket's slot still holds it: the window
	// must skip it by its index): 1 failure in 4 calls.
	later := at.Add(11 * time.Second)
	for range 3 {
		rateCall(t, s, "breaker:gone", later, engine.Success)
	}
	v := rateCall(t, s, "breaker:gone", later, engine.Fail)
	require.Equal(t, circuitbreaker.ClosedState, v.State, "the old failures left the window")
	require.EqualValues(t, 7, v.Executions, "the counts since the last transition still hold them")
	// Within the new window the rate opens it again: 3 failures in 6 calls.
	v = rateCall(t, s, "breaker:gone", later.Add(time.Second), engine.Fail)
	require.Equal(t, circuitbreaker.ClosedState, v.State, "2 failures in 5 calls")
	v = rateCall(t, s, "breaker:gone", later.Add(time.Second), engine.Fail)
	require.Equal(t, circuitbreaker.OpenState, v.State)
}

func rateSuccessHeavy(t *testing.T, s engine.State) {
	const key = "breaker:heavy"
	at := t0.Truncate(10 * time.Second)
	// A third of the calls fail, for a minute: below half, it stays closed
	// however many fail in a row across buckets.
	for i := range 60 {
		now := at.Add(time.Duration(i) * time.Second)
		for _, c := range []engine.Count{engine.Success, engine.Fail, engine.Success} {
			require.Equal(t, circuitbreaker.ClosedState, rateCall(t, s, key, now, c).State, "second %d", i)
		}
	}
}

// probeLease: a probe whose end never reaches the store (its worker died)
// holds its slot for its lease only; the next acquire after it is a new
// probe in a new half-open generation, which a late record of the lost
// probe does not disturb, and whose success closes the breaker.
func probeLease(t *testing.T, s engine.State) {
	const key = "breaker:lease"
	lease := func(o engine.BreakerOp) engine.BreakerOp { o.ProbeLease = 30 * time.Second; return o }
	for range 3 {
		p := step(t, s, key, lease(op(engine.BreakerAcquire, t0)))
		record(t, s, key, t0, p, engine.Fail)
	}
	half := t0.Add(time.Minute)
	lost := step(t, s, key, lease(op(engine.BreakerAcquire, half)))
	require.True(t, lost.Granted)
	require.True(t, lost.Probe)
	require.Equal(t, circuitbreaker.HalfOpenState, lost.State)
	// Within the lease the slot is taken.
	refused := step(t, s, key, lease(op(engine.BreakerAcquire, half.Add(29*time.Second))))
	require.False(t, refused.Granted, "the probe's lease has not passed")
	// After it, another probe goes through, in a generation of its own.
	probe := step(t, s, key, lease(op(engine.BreakerAcquire, half.Add(30*time.Second))))
	require.True(t, probe.Granted, "a lost probe must not hold the breaker half open for good")
	require.True(t, probe.Probe)
	require.Greater(t, probe.Gen, lost.Gen)
	// The lost probe's late failure is stale; the new probe's success closes.
	o := lease(op(engine.BreakerRecord, half.Add(31*time.Second)))
	o.Gen, o.Probe, o.Count = lost.Gen, true, engine.Fail
	v := step(t, s, key, o)
	require.Equal(t, circuitbreaker.HalfOpenState, v.State, "a stale probe's end changes nothing")
	o.Gen, o.Count = probe.Gen, engine.Success
	v = step(t, s, key, o)
	require.Equal(t, circuitbreaker.ClosedState, v.State)
	// Without a lease, a probe holds its slot until its end is recorded.
	const noLease = "breaker:nolease"
	for range 3 {
		p := step(t, s, noLease, op(engine.BreakerAcquire, t0))
		record(t, s, noLease, t0, p, engine.Fail)
	}
	require.True(t, step(t, s, noLease, op(engine.BreakerAcquire, half)).Granted)
	require.False(t, step(t, s, noLease, op(engine.BreakerAcquire, half.Add(50*time.Minute))).Granted)
}
