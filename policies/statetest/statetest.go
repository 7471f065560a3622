// Package statetest is the conformance suite of a [state.State]: the rules
// every store that breakers and budgets share keeps, as tests a store runs
// against itself. state.Memory and contrib/redis run it; so
// should a store of your own:
//
//	func TestConformance(t *testing.T) {
//		statetest.Run(t, func(t *testing.T) state.State { return newStore(t) })
//	}
//
// The rules: a breaker opens after FailureThreshold consecutive failures
// (or at FailureRate over Window, once MinimumCalls are in it), refuses
// until Delay has passed, grants HalfOpenProbes probes for every worker,
// closes after SuccessThreshold successful probes and reopens on a failed
// one; the end of a call granted in a generation the breaker has left
// changes nothing; a probe whose end never comes holds its slot for
// ProbeLease only; Draw stops at its limit; Ratio allows MinRetries, then
// Ratio retries per call over a sliding window; keys are separate; and
// every step is atomic, so that workers racing on one key never both take
// the last unit or the one probe slot.
package statetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/policies/state"
)

// Run runs the rules against the states newState returns, a fresh one per
// test.
func Run(t *testing.T, newState func(t *testing.T) state.State) {
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
	t.Run("breaker: a probe slot is freed once", func(t *testing.T) {
		probeFreedOnce(t, newState(t))
	})
	t.Run("breaker: random steps answer as state.BreakerEntry.Apply does", func(t *testing.T) {
		randomSteps(t, newState(t))
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
	t.Run("steps are atomic: racing draws never pass the limit", func(t *testing.T) {
		racingDraws(t, newState(t))
	})
	t.Run("steps are atomic: racing acquires share one probe", func(t *testing.T) {
		racingProbes(t, newState(t))
	})
	runSteps(t, newState)
}

// racers is how many workers race on one key.
const racers = 8

// race runs step on racers goroutines at once and returns how many said yes.
func race(t *testing.T, step func() (bool, error)) int {
	t.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		yes   atomic.Int64
		errs  = make(chan error, racers)
	)
	for range racers {
		wg.Go(func() {
			<-start
			for range 4 {
				ok, err := step()
				if err != nil {
					errs <- err
					return
				}
				if ok {
					yes.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return int(yes.Load())
}

func racingDraws(t *testing.T, s state.State) {
	n := race(t, func() (bool, error) {
		v, err := s.Draw(context.Background(), "task:race", 5, time.Hour)
		return v.OK, err
	})
	require.Equal(t, 5, n, "%d workers × 4 draws on a limit of 5", racers)
}

func racingProbes(t *testing.T, s state.State) {
	const key = "breaker:race"
	for range 3 {
		record(t, s, key, t0, step(t, s, key, op(state.BreakerAcquire, t0)), state.Fail)
	}
	half := t0.Add(time.Minute)
	n := race(t, func() (bool, error) {
		v, err := s.Breaker(context.Background(), key, op(state.BreakerAcquire, half))
		return v.Granted, err
	})
	require.Equal(t, 1, n, "one probe slot for %d racing workers", racers)
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func op(kind state.BreakerOpKind, now time.Time) state.BreakerOp {
	return state.BreakerOp{Kind: kind, Now: now, FailureThreshold: 3, Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, TTL: time.Hour}
}

func step(t *testing.T, s state.State, key string, o state.BreakerOp) state.BreakerView {
	t.Helper()
	v, err := s.Breaker(context.Background(), key, o)
	require.NoError(t, err)
	return v
}

func record(t *testing.T, s state.State, key string, now time.Time, p state.BreakerView, c state.Count) state.BreakerView {
	t.Helper()
	o := op(state.BreakerRecord, now)
	o.Gen, o.Probe, o.Count = p.Gen, p.Probe, c
	return step(t, s, key, o)
}

func breakerCycle(t *testing.T, s state.State) {
	const key = "breaker:a"
	// Three workers' failures count toward one threshold.
	var last state.BreakerView
	for i := range 3 {
		p := step(t, s, key, op(state.BreakerAcquire, t0))
		require.True(t, p.Granted, "call %d", i)
		require.False(t, p.Probe)
		last = record(t, s, key, t0, p, state.Fail)
	}
	require.Equal(t, circuitbreaker.OpenState, last.State)
	require.True(t, last.Changed)
	require.Equal(t, circuitbreaker.ClosedState, last.From)
	require.Equal(t, t0.UnixMicro(), last.OpenedAt.UnixMicro())
	require.EqualValues(t, 1, last.Gen)

	// Open: refused until the cool-down has passed.
	v := step(t, s, key, op(state.BreakerAcquire, t0.Add(59*time.Second)))
	require.False(t, v.Granted)
	require.Equal(t, circuitbreaker.OpenState, v.State)

	// Then one probe, for everyone.
	probe := step(t, s, key, op(state.BreakerAcquire, t0.Add(time.Minute)))
	require.True(t, probe.Granted)
	require.True(t, probe.Probe)
	require.Equal(t, circuitbreaker.HalfOpenState, probe.State)
	require.True(t, probe.Changed)
	second := step(t, s, key, op(state.BreakerAcquire, t0.Add(time.Minute)))
	require.False(t, second.Granted, "a second probe in the same cool-down")

	// A failed probe reopens it; the next cool-down gives one more probe.
	v = record(t, s, key, t0.Add(time.Minute), probe, state.Fail)
	require.Equal(t, circuitbreaker.OpenState, v.State)
	require.Equal(t, circuitbreaker.HalfOpenState, v.From)
	probe = step(t, s, key, op(state.BreakerAcquire, t0.Add(2*time.Minute)))
	require.True(t, probe.Probe)

	// A successful probe closes it for everyone.
	v = record(t, s, key, t0.Add(2*time.Minute), probe, state.Success)
	require.Equal(t, circuitbreaker.ClosedState, v.State)
	require.True(t, v.Changed)
	v = step(t, s, key, op(state.BreakerAcquire, t0.Add(2*time.Minute)))
	require.True(t, v.Granted)
	require.False(t, v.Probe)

	// A success resets the consecutive count.
	for range 2 {
		record(t, s, key, t0, step(t, s, key, op(state.BreakerAcquire, t0)), state.Fail)
	}
	record(t, s, key, t0, step(t, s, key, op(state.BreakerAcquire, t0)), state.Success)
	v = record(t, s, key, t0, step(t, s, key, op(state.BreakerAcquire, t0)), state.Fail)
	require.Equal(t, circuitbreaker.ClosedState, v.State)
	require.EqualValues(t, 4, v.Executions)
	require.EqualValues(t, 3, v.Failures)
	require.EqualValues(t, 1, v.Successes)
}

func staleRecord(t *testing.T, s state.State) {
	const key = "breaker:stale"
	early := step(t, s, key, op(state.BreakerAcquire, t0)) // granted while closed, gen 0
	for range 3 {
		record(t, s, key, t0, step(t, s, key, op(state.BreakerAcquire, t0)), state.Fail)
	}
	probe := step(t, s, key, op(state.BreakerAcquire, t0.Add(time.Minute)))
	require.True(t, probe.Probe)
	// The early call ends now: it neither frees the probe slot nor closes it.
	v := record(t, s, key, t0.Add(time.Minute), early, state.Success)
	require.Equal(t, circuitbreaker.HalfOpenState, v.State)
	require.False(t, v.Changed)
	require.False(t, step(t, s, key, op(state.BreakerAcquire, t0.Add(time.Minute))).Granted)
}

func currentAndSet(t *testing.T, s state.State) {
	const key = "breaker:current"
	o := op(state.BreakerSet, t0)
	o.To = circuitbreaker.OpenState
	v := step(t, s, key, o)
	require.Equal(t, circuitbreaker.OpenState, v.State)
	probe := step(t, s, key, op(state.BreakerAcquire, t0.Add(time.Minute)))
	require.True(t, probe.Probe)
	// A call without a permit frees the probe slot and counts now.
	c := op(state.BreakerRecordCurrent, t0.Add(time.Minute))
	c.Count = state.Success
	v = step(t, s, key, c)
	require.Equal(t, circuitbreaker.ClosedState, v.State)
	o.To = circuitbreaker.ClosedState
	v = step(t, s, key, o)
	require.False(t, v.Changed, "already closed")
}

func draws(t *testing.T, s state.State) {
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

func ratio(t *testing.T, s state.State) {
	ctx := context.Background()
	at := t0.Truncate(10 * time.Second)
	o := state.RatioOp{Now: at, Window: 10 * time.Second, Ratio: 0.5, MinRetries: 2}
	try := func(retry bool) state.RatioView {
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

	// Calls held back travel with a step: a record of several, and a
	// retry's ask, which records them first, even when it is refused.
	o.Now, o.Retry, o.Calls = at.Add(80*time.Second), false, 3
	v, err := s.Ratio(ctx, "retry:r", o)
	require.NoError(t, err)
	require.True(t, v.OK)
	require.InDelta(t, 3, v.Calls, 1e-9, "one step, three calls")
	o.Retry, o.Calls = true, 2
	for range 2 {
		v, err = s.Ratio(ctx, "retry:r", o)
		require.NoError(t, err)
		require.True(t, v.OK)
	}
	require.InDelta(t, 7, v.Calls, 1e-9)
	require.InDelta(t, 2, v.Retries, 1e-9)
	o.Calls = 1
	v, err = s.Ratio(ctx, "retry:r", o)
	require.NoError(t, err)
	require.True(t, v.OK, "3 retries ≤ 0.5 × 8 calls")
	o.Calls = 0
	v, err = s.Ratio(ctx, "retry:r", o)
	require.NoError(t, err)
	require.True(t, v.OK, "4 retries ≤ 0.5 × 8 calls")
	v, err = s.Ratio(ctx, "retry:r", o)
	require.NoError(t, err)
	require.False(t, v.OK, "5 retries > 0.5 × 8 calls")
	o.Calls = 1
	v, err = s.Ratio(ctx, "retry:r", o)
	require.NoError(t, err)
	require.False(t, v.OK, "5 retries > 0.5 × 9 calls")
	require.InDelta(t, 9, v.Calls, 1e-9, "a refused retry still records the calls it carries")
	require.InDelta(t, 4, v.Retries, 1e-9)
}

func separateKeys(t *testing.T, s state.State) {
	for range 3 {
		record(t, s, "breaker:x", t0, step(t, s, "breaker:x", op(state.BreakerAcquire, t0)), state.Fail)
	}
	require.False(t, step(t, s, "breaker:x", op(state.BreakerAcquire, t0)).Granted)
	require.True(t, step(t, s, "breaker:y", op(state.BreakerAcquire, t0)).Granted)
	v, err := s.Draw(context.Background(), "task:other", 1, time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, v.Used)
}

// rateOp is op in failure-rate mode: half of at least 4 calls over 10 s,
// with a FailureThreshold of 2 that the rate overrides.
func rateOp(kind state.BreakerOpKind, now time.Time) state.BreakerOp {
	o := op(kind, now)
	o.FailureThreshold, o.FailureRate, o.MinimumCalls, o.Window = 2, 0.5, 4, 10*time.Second
	return o
}

// rateCall makes one call through the shared breaker at now, ending with c.
func rateCall(t *testing.T, s state.State, key string, now time.Time, c state.Count) state.BreakerView {
	t.Helper()
	p := step(t, s, key, rateOp(state.BreakerAcquire, now))
	require.True(t, p.Granted, "refused at %s", now)
	o := rateOp(state.BreakerRecord, now)
	o.Gen, o.Probe, o.Count = p.Gen, p.Probe, c
	return step(t, s, key, o)
}

func rateMinimum(t *testing.T, s state.State) {
	const key = "breaker:rate"
	at := t0.Truncate(10 * time.Second)
	// Workers' calls count toward one window: below the minimum no rate
	// opens it, nor do consecutive failures past FailureThreshold.
	rateCall(t, s, key, at, state.Success)
	for i, c := range []state.Count{state.Fail, state.Fail, state.Ignore, state.Success} {
		v := rateCall(t, s, key, at.Add(time.Duration(i)*time.Second), c)
		require.Equal(t, circuitbreaker.ClosedState, v.State, "call %d", i+2)
	}
	// 5 calls (the ignored one is none), 3 failed: at least half.
	v := rateCall(t, s, key, at.Add(4*time.Second), state.Fail)
	require.Equal(t, circuitbreaker.OpenState, v.State)
	require.True(t, v.Changed)
	require.Equal(t, at.Add(4*time.Second).UnixMicro(), v.OpenedAt.UnixMicro())

	// Probe and close as with a count.
	require.False(t, step(t, s, key, rateOp(state.BreakerAcquire, at.Add(63*time.Second))).Granted)
	probe := step(t, s, key, rateOp(state.BreakerAcquire, at.Add(64*time.Second)))
	require.True(t, probe.Probe)
	o := rateOp(state.BreakerRecord, at.Add(64*time.Second))
	o.Gen, o.Probe, o.Count = probe.Gen, probe.Probe, state.Fail
	require.Equal(t, circuitbreaker.OpenState, step(t, s, key, o).State, "a failed probe reopens it")
	probe = step(t, s, key, rateOp(state.BreakerAcquire, at.Add(124*time.Second)))
	require.True(t, probe.Probe)
	o = rateOp(state.BreakerRecord, at.Add(124*time.Second))
	o.Gen, o.Probe, o.Count = probe.Gen, probe.Probe, state.Success
	require.Equal(t, circuitbreaker.ClosedState, step(t, s, key, o).State)

	// Closed again, the window starts empty: the failures before the
	// outage, still within 10 s of a bucket, do not count.
	for i := range 3 {
		v = rateCall(t, s, key, at.Add(124*time.Second), state.Fail)
		require.Equal(t, circuitbreaker.ClosedState, v.State, "failure %d after closing", i+1)
	}
	v = rateCall(t, s, key, at.Add(124*time.Second), state.Fail)
	require.Equal(t, circuitbreaker.OpenState, v.State)
}

func rateWindowSlides(t *testing.T, s state.State) {
	at := t0.Truncate(10 * time.Second)
	for _, key := range []string{"breaker:gone", "breaker:kept"} {
		for range 3 {
			require.Equal(t, circuitbreaker.ClosedState, rateCall(t, s, key, at, state.Fail).State)
		}
	}
	// 9 s on, the first second's bucket is still in the window: 4 of 4.
	require.Equal(t, circuitbreaker.OpenState, rateCall(t, s, "breaker:kept", at.Add(9*time.Second), state.Fail).State)
	// 11 s on, it has left (its bucket's slot still holds it: the window
	// must skip it by its index): 1 failure in 4 calls.
	later := at.Add(11 * time.Second)
	for range 3 {
		rateCall(t, s, "breaker:gone", later, state.Success)
	}
	v := rateCall(t, s, "breaker:gone", later, state.Fail)
	require.Equal(t, circuitbreaker.ClosedState, v.State, "the old failures left the window")
	require.EqualValues(t, 7, v.Executions, "the counts since the last transition still hold them")
	// Within the new window the rate opens it again: 3 failures in 6 calls.
	v = rateCall(t, s, "breaker:gone", later.Add(time.Second), state.Fail)
	require.Equal(t, circuitbreaker.ClosedState, v.State, "2 failures in 5 calls")
	v = rateCall(t, s, "breaker:gone", later.Add(time.Second), state.Fail)
	require.Equal(t, circuitbreaker.OpenState, v.State)
}

func rateSuccessHeavy(t *testing.T, s state.State) {
	const key = "breaker:heavy"
	at := t0.Truncate(10 * time.Second)
	// A third of the calls fail, for a minute: below half, it stays closed
	// however many fail in a row across buckets.
	for i := range 60 {
		now := at.Add(time.Duration(i) * time.Second)
		for _, c := range []state.Count{state.Success, state.Fail, state.Success} {
			require.Equal(t, circuitbreaker.ClosedState, rateCall(t, s, key, now, c).State, "second %d", i)
		}
	}
}

// probeLease: a probe whose end never reaches the store (its worker died)
// holds its slot for its lease only; the next acquire after it is a new
// probe in a new half-open generation, which a late record of the lost
// probe does not disturb, and whose success closes the breaker.
func probeLease(t *testing.T, s state.State) {
	const key = "breaker:lease"
	lease := func(o state.BreakerOp) state.BreakerOp { o.ProbeLease = 30 * time.Second; return o }
	for range 3 {
		p := step(t, s, key, lease(op(state.BreakerAcquire, t0)))
		record(t, s, key, t0, p, state.Fail)
	}
	half := t0.Add(time.Minute)
	lost := step(t, s, key, lease(op(state.BreakerAcquire, half)))
	require.True(t, lost.Granted)
	require.True(t, lost.Probe)
	require.Equal(t, circuitbreaker.HalfOpenState, lost.State)
	// Within the lease the slot is taken.
	refused := step(t, s, key, lease(op(state.BreakerAcquire, half.Add(29*time.Second))))
	require.False(t, refused.Granted, "the probe's lease has not passed")
	// After it, another probe goes through, in a generation of its own.
	probe := step(t, s, key, lease(op(state.BreakerAcquire, half.Add(30*time.Second))))
	require.True(t, probe.Granted, "a lost probe must not hold the breaker half open for good")
	require.True(t, probe.Probe)
	require.Greater(t, probe.Gen, lost.Gen)
	// The lost probe's late failure is stale; the new probe's success closes.
	o := lease(op(state.BreakerRecord, half.Add(31*time.Second)))
	o.Gen, o.Probe, o.Count = lost.Gen, true, state.Fail
	v := step(t, s, key, o)
	require.Equal(t, circuitbreaker.HalfOpenState, v.State, "a stale probe's end changes nothing")
	o.Gen, o.Count = probe.Gen, state.Success
	v = step(t, s, key, o)
	require.Equal(t, circuitbreaker.ClosedState, v.State)
	// Without a lease, a probe holds its slot until its end is recorded.
	const noLease = "breaker:nolease"
	for range 3 {
		p := step(t, s, noLease, op(state.BreakerAcquire, t0))
		record(t, s, noLease, t0, p, state.Fail)
	}
	require.True(t, step(t, s, noLease, op(state.BreakerAcquire, half)).Granted)
	require.False(t, step(t, s, noLease, op(state.BreakerAcquire, half.Add(50*time.Minute))).Granted)
}

// probeFreedOnce: the end of a call that holds no permit frees the probe
// slot that is out; the late record of that probe's own permit frees
// nothing more, so that the breaker still lets one probe through at a time.
func probeFreedOnce(t *testing.T, s state.State) {
	const key = "breaker:freed-once"
	for range 3 {
		record(t, s, key, t0, step(t, s, key, op(state.BreakerAcquire, t0)), state.Fail)
	}
	half := t0.Add(time.Minute)
	probe := step(t, s, key, op(state.BreakerAcquire, half))
	require.True(t, probe.Probe)
	current := op(state.BreakerRecordCurrent, half)
	current.Count = state.Ignore
	step(t, s, key, current)
	v := record(t, s, key, half, probe, state.Ignore)
	require.Equal(t, circuitbreaker.HalfOpenState, v.State)
	require.True(t, step(t, s, key, op(state.BreakerAcquire, half)).Granted, "the one slot is free")
	require.False(t, step(t, s, key, op(state.BreakerAcquire, half)).Granted, "and there is one slot only")
}

// randomSteps holds a store to the Go rule: sequences of random breaker
// steps (acquires, records of the permits granted, of the current state,
// sets), with random settings and random waits, each made on the store and
// on a state.BreakerEntry in memory, must answer alike step by step. A
// store that runs the rule in its own language (a Redis script) is checked
// here against the one rule. The sequences are seeded: the same on every
// run. Times are whole milliseconds, within the records' TTL, so that a
// store that keeps milliseconds and expires keys on its own clock agrees.
func randomSteps(t *testing.T, s state.State) {
	rng := rand.New(rand.NewPCG(29, 30))
	counts := []state.Count{state.Fail, state.Success, state.Ignore}
	states := []circuitbreaker.State{circuitbreaker.ClosedState, circuitbreaker.OpenState, circuitbreaker.HalfOpenState}
	for seq := range 24 {
		key := fmt.Sprintf("breaker:random:%d", seq)
		settings := state.BreakerOp{
			FailureThreshold: 1 + rng.IntN(4),
			Delay:            time.Duration(5+rng.IntN(30)) * time.Second,
			HalfOpenProbes:   1 + rng.IntN(2),
			SuccessThreshold: 1 + rng.IntN(2),
			TTL:              24 * time.Hour,
		}
		if rng.IntN(2) == 0 {
			settings.ProbeLease = time.Duration(5+rng.IntN(20)) * time.Second
		}
		if rng.IntN(3) == 0 {
			settings.FailureRate, settings.MinimumCalls, settings.Window = 0.5, 2+rng.IntN(3), time.Minute
		}
		var rule state.BreakerEntry
		var held []state.BreakerView // permits granted and not yet recorded
		var history []string
		now := t0
		for i := range 80 {
			now = now.Add(time.Duration(rng.IntN(8000)) * time.Millisecond)
			o := settings
			o.Now = now
			what := ""
			switch r := rng.IntN(10); {
			case r < 4 || r < 8 && len(held) == 0:
				o.Kind, what = state.BreakerAcquire, "acquire"
			case r < 8:
				k := rng.IntN(len(held))
				p := held[k]
				held = append(held[:k], held[k+1:]...)
				o.Kind, o.Gen, o.Probe, o.Count = state.BreakerRecord, p.Gen, p.Probe, counts[rng.IntN(len(counts))]
				o.N = ends(rng)
				what = fmt.Sprintf("record gen %d probe %v count %d ×%d", p.Gen, p.Probe, o.Count, o.N)
			case r < 9:
				o.Kind, o.Count = state.BreakerRecordCurrent, counts[rng.IntN(len(counts))]
				o.N = ends(rng)
				what = fmt.Sprintf("record current count %d ×%d", o.Count, o.N)
			default:
				o.Kind, o.To = state.BreakerSet, states[rng.IntN(len(states))]
				what = fmt.Sprintf("set %v", o.To)
			}
			want := rule.Apply(o)
			got := step(t, s, key, o)
			history = append(history, fmt.Sprintf("%d: %s at +%s → %v gen %d granted %v probe %v", i, what, now.Sub(t0), want.State, want.Gen, want.Granted, want.Probe))
			require.Equal(t, view(want), view(got), "sequence %d step %d (%s at +%s), settings %+v; the steps so far, as the rule answered them:\n%s",
				seq, i, what, now.Sub(t0), settings, strings.Join(history, "\n"))
			if want.Granted {
				held = append(held, want)
			}
		}
	}
}

// ends is a record step's N: mostly 0 (one end), else up to 4 ends alike,
// as a worker sends the successes it held back.
func ends(rng *rand.Rand) int {
	if rng.IntN(3) > 0 {
		return 0
	}
	return 1 + rng.IntN(4)
}

// view is what a breaker step answers, its time in milliseconds; a breaker
// that never opened may say so with the zero time or the Unix epoch, and
// From means something only when the step Changed the state.
func view(v state.BreakerView) state.BreakerView {
	if !v.Changed {
		v.From = circuitbreaker.ClosedState
	}
	if ms := v.OpenedAt.UnixMilli(); ms > 0 {
		v.OpenedAt = time.UnixMilli(ms).UTC()
	} else {
		v.OpenedAt = time.Time{}
	}
	return v
}
