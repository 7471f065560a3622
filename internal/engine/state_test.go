package engine_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/policies/statetest"
)

func TestMemoryStateConformance(t *testing.T) {
	statetest.Run(t, func(*testing.T) state.State { return state.NewMemory() })
}

func limits(st state.State, clk clock.Clock) engine.BreakerLimits {
	return engine.BreakerLimits{Name: "p", FailureThreshold: 5, Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1,
		Clock: clk, State: st, Key: "breaker:p", TTL: time.Hour}
}

// A breaker on a MemoryState of its own decides exactly as a local one, over
// a random run of calls, outcomes and waits.
func TestSharedBreakerDecidesAsLocal(t *testing.T) {
	for seed := range uint64(20) {
		clk := clock.NewFake(time.Unix(1000, 0))
		local := engine.NewBreaker(limits(nil, clk))
		shared := engine.NewBreaker(limits(state.NewMemory(), clk))
		var lp, sp []engine.Permit
		var lc, sc []circuitbreaker.State
		rnd := rand.New(rand.NewPCG(seed, 1))
		for i := range 400 {
			switch r := rnd.IntN(10); {
			case r < 4:
				p1, ok1 := local.Acquire(nil)
				p2, ok2 := shared.Acquire(nil)
				require.Equal(t, ok1, ok2, "seed %d step %d", seed, i)
				require.Equal(t, p1.Probe(), p2.Probe())
				require.True(t, p2.State().Shared)
				if ok1 {
					lp, sp = append(lp, p1), append(sp, p2)
				}
			case r < 8 && len(lp) > 0:
				j := rnd.IntN(len(lp))
				c := []state.Count{state.Fail, state.Fail, state.Success, state.Ignore}[rnd.IntN(4)]
				require.NoError(t, local.Record(lp[j], c, nil))
				require.NoError(t, shared.Record(sp[j], c, nil))
				lp, sp = append(lp[:j], lp[j+1:]...), append(sp[:j], sp[j+1:]...)
			default:
				clk.Advance(time.Duration(rnd.IntN(40)) * time.Second)
			}
			lc, sc = append(lc, local.State()), append(sc, shared.State())
			require.Equal(t, local.Remaining(nil), shared.Remaining(nil))
		}
		require.Equal(t, lc, sc, "seed %d", seed)
		e1, f1, s1 := local.Counts()
		e2, f2, s2 := shared.Counts()
		require.Equal(t, []uint{e1, f1, s1}, []uint{e2, f2, s2})
	}
}

// Workers' breakers on one state open together, after the threshold counted
// across them, let one probe through per cool-down for all, and close for all.
func TestSharedBreakerFleet(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	st := state.NewMemory()
	var changes []string
	workers := make([]*engine.Breaker, 4)
	for i := range workers {
		lim := limits(st, clk)
		lim.OnStateChange = func(from, to circuitbreaker.State) { changes = append(changes, from.String()+">"+to.String()) }
		workers[i] = engine.NewBreaker(lim)
	}
	for i := range 5 {
		w := workers[i%4]
		p, ok := w.Acquire(nil)
		require.True(t, ok)
		require.NoError(t, w.Record(p, state.Fail, nil))
	}
	for _, w := range workers {
		_, ok := w.Acquire(nil)
		require.False(t, ok, "every worker sees it open")
		require.Equal(t, circuitbreaker.OpenState, w.State())
		require.Equal(t, time.Minute, w.Remaining(nil))
	}
	clk.Advance(time.Minute)
	probe, ok := workers[2].Acquire(nil)
	require.True(t, ok)
	require.True(t, probe.Probe())
	for _, w := range workers {
		_, ok := w.Acquire(nil)
		require.False(t, ok, "one probe for the fleet")
	}
	require.NoError(t, workers[2].Record(probe, state.Success, nil))
	for _, w := range workers {
		_, ok := w.Acquire(nil)
		require.True(t, ok, "closed for everyone")
		require.Equal(t, circuitbreaker.ClosedState, w.State())
	}
	require.Equal(t, []string{"closed>open", "open>half-open", "half-open>closed"}, changes)
}

// failing is a State that is down.
type failing struct{ err error }

func (f failing) Breaker(context.Context, string, state.BreakerOp) (state.BreakerView, error) {
	return state.BreakerView{}, f.err
}
func (f failing) Draw(context.Context, string, int64, time.Duration) (state.DrawView, error) {
	return state.DrawView{}, f.err
}
func (f failing) Ratio(context.Context, string, state.RatioOp) (state.RatioView, error) {
	return state.RatioView{}, f.err
}

// switchable is a state.Memory that can be taken down and brought back.
type switchable struct {
	*state.Memory
	down bool
}

func (s *switchable) Breaker(ctx context.Context, key string, op state.BreakerOp) (state.BreakerView, error) {
	if s.down {
		return state.BreakerView{}, context.DeadlineExceeded
	}
	return s.Memory.Breaker(ctx, key, op)
}

// Steps is down with the rest: Memory's batch would answer.
func (s *switchable) Steps(ctx context.Context, steps []state.Step) ([]state.StepResult, error) {
	if s.down {
		return nil, context.DeadlineExceeded
	}
	return s.Memory.Steps(ctx, steps)
}

// A breaker whose state is down decides locally, says so on each permit, and
// counts this worker's calls alone.
func TestSharedBreakerDegradesToLocal(t *testing.T) {
	down := errors.New("connection refused")
	b := engine.NewBreaker(limits(failing{down}, nil))
	for range 5 {
		p, ok := b.Acquire(nil)
		require.True(t, ok)
		require.False(t, p.State().Shared)
		require.ErrorIs(t, p.State().Degraded, down)
		require.NoError(t, b.Record(p, state.Fail, nil), "a local permit is recorded locally")
	}
	p, ok := b.Acquire(nil)
	require.False(t, ok, "the local breaker opened after this worker's own failures")
	require.Equal(t, state.PolicyBreaker, p.State().Policy)
	require.Equal(t, circuitbreaker.OpenState, b.State())
	require.Equal(t, "unavailable", state.DegradedType(p.State().Degraded))
}

// A permit from the shared state whose end cannot be recorded there is
// recorded locally, and Record says why; when the state is back, it decides
// again.
func TestSharedBreakerRecordFallsBack(t *testing.T) {
	st := &switchable{Memory: state.NewMemory()}
	b := engine.NewBreaker(limits(st, clock.NewFake(time.Unix(0, 0))))
	for range 5 {
		p, ok := b.Acquire(nil)
		require.True(t, ok)
		st.down = true
		err := b.Record(p, state.Fail, nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, "timeout", state.DegradedType(err))
		st.down = false
	}
	// The shared record saw none of the failures; the local one all five.
	p, ok := b.Acquire(nil)
	require.True(t, ok)
	require.True(t, p.State().Shared)
	st.down = true
	_, ok = b.Acquire(nil)
	require.False(t, ok, "locally open")
}

func TestTaskCountExpires(t *testing.T) {
	st := state.NewMemory()
	v, err := st.Draw(context.Background(), "task:a", 1, -time.Second)
	require.NoError(t, err)
	require.True(t, v.OK)
	v, err = st.Draw(context.Background(), "task:a", 1, time.Hour)
	require.NoError(t, err)
	require.True(t, v.OK, "the expired count started again")
}
