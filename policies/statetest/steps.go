package statetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/policies/state"
)

// runSteps runs the rules of a state.Stepper, if the state is one: a batch
// answers as its steps made one by one do, a gate that refuses stops the
// batch, and a malformed step is an error.
func runSteps(t *testing.T, newState func(t *testing.T) state.State) {
	stepper := func(t *testing.T) state.Stepper {
		st, ok := newState(t).(state.Stepper)
		if !ok {
			t.Skip("the state makes its steps one by one (it is not a state.Stepper)")
		}
		return st
	}
	t.Run("steps: a batch answers as its steps one by one", func(t *testing.T) {
		batchAsSteps(t, stepper(t))
	})
	t.Run("steps: a gate that refuses stops the batch", func(t *testing.T) {
		gates(t, stepper(t))
	})
	t.Run("steps: a step that sets no kind, or two, is an error", func(t *testing.T) {
		s := stepper(t)
		_, err := s.Steps(context.Background(), []state.Step{{Key: "breaker:x"}})
		require.Error(t, err)
		o := op(state.BreakerAcquire, t0)
		_, err = s.Steps(context.Background(), []state.Step{{Key: "breaker:x", Breaker: &o, Draw: &state.DrawOp{Limit: 1, TTL: time.Hour}}})
		require.Error(t, err)
	})
	t.Run("steps are atomic: racing batches share one probe", func(t *testing.T) {
		s := stepper(t)
		const key = "breaker:race-batch"
		for range 3 {
			record(t, s, key, t0, step(t, s, key, op(state.BreakerAcquire, t0)), state.Fail)
		}
		half := t0.Add(time.Minute)
		n := race(t, func() (bool, error) {
			o := op(state.BreakerAcquire, half)
			r, err := s.Steps(context.Background(), []state.Step{
				{Key: "retry:race-batch", Ratio: &state.RatioOp{Now: half, Window: time.Minute, Ratio: 0.5}},
				{Key: key, Breaker: &o, Gate: true},
			})
			if err != nil {
				return false, err
			}
			return r[1].Breaker.Granted, nil
		})
		require.Equal(t, 1, n, "one probe slot for %d racing workers", racers)
	})
}

// batchAsSteps makes random batches of breaker, draw and ratio steps on s
// and the same steps one by one on a state.Memory, and holds s's answers
// to the Memory's.
func batchAsSteps(t *testing.T, s state.Stepper) {
	rng := rand.New(rand.NewPCG(31, 32))
	ref := state.NewMemory()
	ctx := context.Background()
	now := t0
	var held []state.BreakerView
	for b := range 60 {
		var steps []state.Step
		for range 1 + rng.IntN(4) {
			now = now.Add(time.Duration(rng.IntN(20000)) * time.Millisecond)
			switch r := rng.IntN(6); {
			case r == 0:
				steps = append(steps, state.Step{Key: "task:batch", Draw: &state.DrawOp{Limit: 20, TTL: time.Hour}})
			case r == 1:
				steps = append(steps, state.Step{Key: "retry:batch", Ratio: &state.RatioOp{Retry: rng.IntN(2) == 0, Calls: rng.IntN(3), Now: now, Window: time.Minute, Ratio: 0.5, MinRetries: 1}})
			case r == 2 && len(held) > 0:
				o := op(state.BreakerRecord, now)
				p := held[0]
				held = held[1:]
				o.Gen, o.Probe, o.Count = p.Gen, p.Probe, []state.Count{state.Fail, state.Success}[rng.IntN(2)]
				o.N = ends(rng)
				steps = append(steps, state.Step{Key: "breaker:batch", Breaker: &o})
			default:
				o := op(state.BreakerAcquire, now)
				steps = append(steps, state.Step{Key: "breaker:batch", Breaker: &o})
			}
		}
		got, err := s.Steps(ctx, steps)
		require.NoError(t, err)
		require.Len(t, got, len(steps))
		for i, st := range steps {
			var want state.StepResult
			switch {
			case st.Breaker != nil:
				want.Breaker, err = ref.Breaker(ctx, st.Key, *st.Breaker)
				require.Equal(t, view(want.Breaker), view(got[i].Breaker), "batch %d step %d", b, i)
				if want.Breaker.Granted {
					held = append(held, want.Breaker)
				}
			case st.Draw != nil:
				want.Draw, err = ref.Draw(ctx, st.Key, st.Draw.Limit, st.Draw.TTL)
				require.Equal(t, want.Draw, got[i].Draw, "batch %d step %d", b, i)
			case st.Ratio != nil:
				want.Ratio, err = ref.Ratio(ctx, st.Key, *st.Ratio)
				require.InDelta(t, want.Ratio.Calls, got[i].Ratio.Calls, 1e-9, "batch %d step %d", b, i)
				require.InDelta(t, want.Ratio.Retries, got[i].Ratio.Retries, 1e-9, "batch %d step %d", b, i)
				require.Equal(t, want.Ratio.OK, got[i].Ratio.OK, "batch %d step %d", b, i)
			}
			require.NoError(t, err)
			require.False(t, got[i].Skipped)
		}
	}
}

// gates: a failure that opens the breaker stops the draw and the retry
// behind it; a draw the task has spent stops the steps behind it; a refused
// acquire is the batch's last step made.
func gates(t *testing.T, s state.Stepper) {
	ctx := context.Background()
	const key = "breaker:gates"
	for range 2 {
		record(t, s, key, t0, step(t, s, key, op(state.BreakerAcquire, t0)), state.Fail)
	}
	p := step(t, s, key, op(state.BreakerAcquire, t0))
	fail := op(state.BreakerRecord, t0)
	fail.Gen, fail.Count = p.Gen, state.Fail
	retry := state.RatioOp{Retry: true, Now: t0, Window: time.Minute, Ratio: 1, MinRetries: 5}
	res, err := s.Steps(ctx, []state.Step{
		{Key: key, Breaker: &fail, Gate: true},
		{Key: "task:gates", Draw: &state.DrawOp{Limit: 3, TTL: time.Hour}, Gate: true},
		{Key: "retry:gates", Ratio: &retry, Gate: true},
	})
	require.NoError(t, err)
	require.Equal(t, "open", fmt.Sprint(res[0].Breaker.State), "the third failure opens it")
	require.True(t, res[1].Skipped, "no draw behind the failure that opened the breaker")
	require.True(t, res[2].Skipped)
	v, err := s.Draw(ctx, "task:gates", 3, time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(1), v.Used, "the skipped draw took nothing")

	// The task's budget: 3, one used above.
	for want := range 3 {
		a := op(state.BreakerAcquire, t0.Add(time.Hour))
		res, err := s.Steps(ctx, []state.Step{
			{Key: "task:gates", Draw: &state.DrawOp{Limit: 3, TTL: time.Hour}, Gate: true},
			{Key: "breaker:gates-2", Breaker: &a},
		})
		require.NoError(t, err)
		require.Equal(t, want < 2, res[0].Draw.OK, "draw %d", want)
		require.Equal(t, want >= 2, res[1].Skipped, "draw %d", want)
	}
	// An open breaker's acquire, a gate, stops the step behind it.
	a := op(state.BreakerAcquire, t0.Add(time.Second))
	res, err = s.Steps(ctx, []state.Step{
		{Key: key, Breaker: &a, Gate: true},
		{Key: "task:gates-3", Draw: &state.DrawOp{Limit: 3, TTL: time.Hour}},
	})
	require.NoError(t, err)
	require.False(t, res[0].Breaker.Granted)
	require.True(t, res[1].Skipped)
}
