package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
)

// counting is a state.Memory that counts the round trips a worker would
// pay on a remote store: each step or batch is one.
type counting struct {
	*state.Memory
	trips atomic.Int64
}

func (c *counting) Breaker(ctx context.Context, key string, op state.BreakerOp) (state.BreakerView, error) {
	c.trips.Add(1)
	return c.Memory.Breaker(ctx, key, op)
}

func (c *counting) Draw(ctx context.Context, key string, limit int64, ttl time.Duration) (state.DrawView, error) {
	c.trips.Add(1)
	return c.Memory.Draw(ctx, key, limit, ttl)
}

func (c *counting) Ratio(ctx context.Context, key string, op state.RatioOp) (state.RatioView, error) {
	c.trips.Add(1)
	return c.Memory.Ratio(ctx, key, op)
}

func (c *counting) Steps(ctx context.Context, steps []state.Step) ([]state.StepResult, error) {
	c.trips.Add(1)
	return c.Memory.Steps(ctx, steps)
}

// through is an Attempter whose attempts go through a breaker, as a
// layer's do: fails says which attempts fail (from 1).
type through struct {
	b     *engine.Breaker
	pend  *engine.Pending
	n     int
	fails func(n int) bool
}

func (a *through) Pending() *engine.Pending {
	a.pend = new(engine.Pending)
	return a.pend
}

func (a *through) Attempt(_ context.Context, n int, _ time.Duration) (int, error) {
	p, ok := a.b.AcquireWith(a.pend, nil)
	if !ok {
		return 0, errRefused
	}
	a.n++
	if a.fails(a.n) {
		_ = a.b.RecordWith(a.pend, p, state.Fail, nil)
		return 0, errors.New("down")
	}
	_ = a.b.RecordWith(a.pend, p, state.Success, nil)
	return n, nil
}

var errRefused = errors.New("refused")

func (a *through) Judge(_ context.Context, err error) engine.Failure {
	if errors.Is(err, errRefused) {
		return engine.Failure{Class: engine.Transient, Rejected: true}
	}
	return engine.Failure{Class: engine.Transient}
}

func (a *through) Done(int, error, engine.Decision) {}

func (a *through) Refusal() error {
	if a.b.State() == circuitbreaker.OpenState && a.b.Remaining(nil) > 0 {
		return errRefused
	}
	return nil
}

// A call pays one step on the State when it succeeds (the acquire, with
// the success before it), one more per failure (its record and the
// task's draw),
// and none while the breaker it saw open cools down; every record reaches
// the State.
func TestCallStepsAreBatched(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	st := &counting{Memory: state.NewMemory()}
	b := engine.NewBreaker(limits(st, clk))
	// (The rate budget joins the batches through package policies' retry,
	// which contrib/redis's round-trip test measures.)
	r := &engine.Retry{MaxAttempts: 3}
	ctx := policies.WithSharedTaskBudget(context.Background(), st, "t", 100)
	call := func(fails func(int) bool) (engine.Report, int64) {
		before := st.trips.Load()
		_, rep := engine.Do[int](ctx, r, clk, &through{b: b, fails: fails})
		return rep, st.trips.Load() - before
	}
	for i := range 10 {
		rep, trips := call(func(int) bool { return false })
		require.Equal(t, "success", rep.Outcome)
		require.Equal(t, int64(1), trips, "call %d: one step", i)
	}
	rep, trips := call(func(n int) bool { return n == 1 })
	require.Equal(t, "success_after_retry", rep.Outcome)
	require.Equal(t, int64(3), trips, "the acquire, the failure's batch, the retry's acquire")
	require.Equal(t, 1, policies.TaskBudgetFrom(ctx).Used(), "the retry drew from the task")

	// Four failures in a row open it: the fourth call's first failure is
	// the fifth. Its batch stops at the failure: no draw.
	for range 2 {
		call(func(int) bool { return true })
	}
	require.Equal(t, circuitbreaker.OpenState, b.State())
	used := policies.TaskBudgetFrom(ctx).Used()
	before := st.trips.Load()
	for range 100 {
		rep, _ := call(func(int) bool { return false })
		require.Equal(t, "rejected", rep.Outcome)
	}
	require.Equal(t, before, st.trips.Load(), "an open breaker refuses by itself while it cools down")
	require.Equal(t, used, policies.TaskBudgetFrom(ctx).Used())
	clk.Advance(time.Minute)
	rep, trips = call(func(int) bool { return false })
	require.Equal(t, "success", rep.Outcome, "the probe, asked of the State")
	require.Equal(t, int64(2), trips, "the probe's acquire, and its end at once")
	require.Equal(t, circuitbreaker.ClosedState, b.State())
	v, err := st.Memory.Breaker(context.Background(), "breaker:p", state.BreakerOp{Kind: state.BreakerAcquire, Now: clk.Now(),
		FailureThreshold: 5, Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, circuitbreaker.ClosedState, v.State)
}

// A transition another worker makes ends this one's refusals at once,
// when the State says so (state.Watcher): a breaker closed by hand.
func TestTransitionHeardEndsRefusals(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	st := &counting{Memory: state.NewMemory()}
	a, b := engine.NewBreaker(limits(st, clk)), engine.NewBreaker(limits(st, clk))
	a.Set(circuitbreaker.OpenState, nil)
	_, ok := b.Acquire(nil)
	require.False(t, ok)
	before := st.trips.Load()
	_, ok = b.Acquire(nil)
	require.False(t, ok)
	require.Equal(t, before, st.trips.Load(), "b refuses by itself")
	a.Set(circuitbreaker.ClosedState, nil)
	_, ok = b.Acquire(nil)
	require.True(t, ok, "a closed it: b asks, and is let through")
}

// A lease of k calls: one ask per k+1 successful calls, their records
// sent with the next ask; a failure ends the lease, and is sent at once.
func TestLeaseWhileClosed(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	st := &counting{Memory: state.NewMemory()}
	lim := limits(st, clk)
	lim.LeaseCalls, lim.LeaseFor = 4, time.Second
	b := engine.NewBreaker(lim)
	r := &engine.Retry{MaxAttempts: 1}
	call := func(fail bool) {
		engine.Do[int](context.Background(), r, clk, &through{b: b, fails: func(int) bool { return fail }})
	}
	for range 10 {
		call(false)
	}
	require.Equal(t, int64(2), st.trips.Load(), "asks at calls 1 and 6")
	e, _, s := b.Counts()
	require.Equal(t, []uint{5, 5}, []uint{e, s}, "the State saw the five calls before the last ask")
	call(true)
	require.Equal(t, int64(4), st.trips.Load(), "the lease was spent: an ask, and the failure sent at once")
	call(false)
	require.Equal(t, int64(5), st.trips.Load(), "the failure ended the lease: the next call asks")
	e, f, s := b.Counts()
	require.Equal(t, []uint{11, 1, 10}, []uint{e, f, s}, "every call before the last ask reached the State")
	// A leased call that fails: the failure sent at once, the lease ended.
	call(true)
	require.Equal(t, int64(6), st.trips.Load(), "the failure of a leased call")
	call(false)
	require.Equal(t, int64(7), st.trips.Load(), "an ask: the lease ended with the failure")
	// A lease ends with its time.
	call(false)
	before := st.trips.Load()
	clk.Advance(2 * time.Second)
	call(false)
	require.Equal(t, before+1, st.trips.Load())
}

// logging is counting that keeps each batch's steps.
type logging struct {
	counting
	batches [][]state.Step
}

func (l *logging) Steps(ctx context.Context, steps []state.Step) ([]state.StepResult, error) {
	l.batches = append(l.batches, append([]state.Step(nil), steps...))
	return l.counting.Steps(ctx, steps)
}

// The successes of closed calls are held back: an admit carries them as
// one record step once 16 are held, or a tenth of the cool-down after the
// first; until then an admit is the acquire alone. A failure carries the
// successes before it first, so the State sees a worker's ends in order:
// failures between successes never add up to the threshold.
func TestSuccessesHeldBack(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	st := &logging{counting: counting{Memory: state.NewMemory()}}
	lim := limits(st, clk)
	lim.FailureThreshold = 2
	b := engine.NewBreaker(lim)
	r := &engine.Retry{MaxAttempts: 1}
	call := func(fail bool) {
		engine.Do[int](context.Background(), r, clk, &through{b: b, fails: func(int) bool { return fail }})
	}
	for range 16 {
		call(false)
	}
	require.Len(t, st.batches, 16)
	for i, batch := range st.batches {
		require.Len(t, batch, 1, "admit %d: the acquire alone", i)
		require.Equal(t, state.BreakerAcquire, batch[0].Breaker.Kind)
	}
	e, _, _ := b.Counts()
	require.Zero(t, e, "the State has seen no end yet")
	call(false)
	carried := st.batches[16]
	require.Len(t, carried, 2, "the 17th admit carries the 16 held")
	require.Equal(t, state.BreakerRecord, carried[0].Breaker.Kind)
	require.Equal(t, state.Success, carried[0].Breaker.Count)
	require.Equal(t, 16, carried[0].Breaker.N)
	e, _, s := b.Counts()
	require.Equal(t, []uint{16, 16}, []uint{e, s})

	// In time: a tenth of the cool-down after the first held success.
	call(false)
	require.Len(t, st.batches[len(st.batches)-1], 1)
	clk.Advance(lim.Delay / 10)
	call(false)
	last := st.batches[len(st.batches)-1]
	require.Len(t, last, 2, "the first held success is 6 s old")
	require.Equal(t, 2, last[0].Breaker.N, "the 17th call's success and the 18th's")

	// Failures between successes, threshold 2: in order, the breaker
	// never sees two in a row.
	for range 10 {
		call(true)
		call(false)
		call(false)
	}
	require.Equal(t, circuitbreaker.ClosedState, b.State())
	_, f, _ := b.Counts()
	require.Equal(t, uint(10), f, "every failure reached the State")
	call(true)
	call(true)
	require.Equal(t, circuitbreaker.OpenState, b.State(), "two in a row open it")
}
