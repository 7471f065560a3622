package redisstate_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	redisstate "github.com/retrace-go/retrace/contrib/redis"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
)

// corruptStores are a store on miniredis and one on the real redis-server
// (whose Lua is the one that runs in production), each with its client, for
// writing another program's data under the store's keys.
func corruptStores(t *testing.T) map[string]struct {
	rdb *redis.Client
	st  *redisstate.Store
	ns  string
} {
	out := map[string]struct {
		rdb *redis.Client
		st  *redisstate.Store
		ns  string
	}{}
	m, _ := newMini(t)
	mini := redis.NewClient(redisstate.ClientOptions(m.Addr(), testStep))
	t.Cleanup(func() { _ = mini.Close() })
	out["miniredis"] = struct {
		rdb *redis.Client
		st  *redisstate.Store
		ns  string
	}{mini, redisstate.New(mini, redisstate.Options{Namespace: "t", Timeout: testStep}), "t"}
	real := redis.NewClient(redisstate.ClientOptions(redisAddr(t), testStep))
	t.Cleanup(func() { _ = real.Close() })
	ns := "heal-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	out["redis-server"] = struct {
		rdb *redis.Client
		st  *redisstate.Store
		ns  string
	}{real, redisstate.New(real, redisstate.Options{Namespace: ns, Timeout: testStep}), ns}
	return out
}

// A breaker record that is not one retrace wrote (a state 3, -1 or 1.5, a
// negative count) heals to a closed breaker on the next step, so that a
// healthy provider is called again; a task count below zero heals to zero,
// so that it never grants more retries than the budget.
func TestCorruptStateHeals(t *testing.T) {
	ctx := context.Background()
	for name, s := range corruptStores(t) {
		t.Run(name, func(t *testing.T) {
			for i, fields := range [][]any{
				{"s", 3}, {"s", -1}, {"s", "1.5"}, {"s", 1, "o", "later"}, {"s", 2, "p", -4}, {"s", 0, "c", "x", "g", 7},
			} {
				key := "breaker:c" + strconv.Itoa(i)
				require.NoError(t, s.rdb.HSet(ctx, s.ns+":"+key, fields...).Err())
				v, err := s.st.Breaker(ctx, key, state.BreakerOp{Kind: state.BreakerAcquire, Now: time.Unix(100, 0),
					FailureThreshold: 5, Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, TTL: time.Hour, ProbeLease: time.Minute})
				require.NoError(t, err, "%v", fields)
				require.Equal(t, circuitbreaker.ClosedState, v.State, "%v", fields)
				require.True(t, v.Granted, "%v: a corrupt record refuses nothing", fields)
			}
			// A closed breaker's acquire reads six fields (s g o e f u): a
			// corrupt one of them heals the record, a new generation; a
			// corrupt one of the other four is healed by the next step that
			// reads all ten, and the permit granted before does not count.
			for _, c := range []struct {
				fields  []any
				healed  bool
				counted bool
			}{
				{[]any{"s", 0, "g", 3, "o", 0, "e", "x", "f", 0, "u", 1, "c", 0, "p", 0, "k", 0, "l", 0}, true, true},
				{[]any{"s", 0, "g", 3, "o", 0, "e", 1, "f", 0, "u", 1, "c", "x", "p", 0, "k", 0, "l", 0}, false, false},
			} {
				key := "breaker:six" + strconv.FormatBool(c.healed)
				require.NoError(t, s.rdb.HSet(ctx, s.ns+":"+key, c.fields...).Err())
				op := state.BreakerOp{Kind: state.BreakerAcquire, Now: time.Unix(100, 0),
					FailureThreshold: 5, Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, TTL: time.Hour, ProbeLease: time.Minute}
				v, err := s.st.Breaker(ctx, key, op)
				require.NoError(t, err)
				require.True(t, v.Granted, "%v", c.fields)
				require.Equal(t, c.healed, v.Gen == 4, "%v: generation %d", c.fields, v.Gen)
				rec := op
				rec.Kind, rec.Gen, rec.Count = state.BreakerRecord, v.Gen, state.Success
				after, err := s.st.Breaker(ctx, key, rec)
				require.NoError(t, err)
				require.Equal(t, uint64(4), after.Gen, "%v: the record is healed now", c.fields)
				require.Equal(t, c.counted, after.Successes == 1, "%v: %+v", c.fields, after)
			}
			key := "task:neg"
			require.NoError(t, s.rdb.Set(ctx, s.ns+":"+key, -1_000_000, time.Hour).Err())
			granted := 0
			for range 20 {
				d, err := s.st.Draw(ctx, key, 3, time.Hour)
				require.NoError(t, err)
				if d.OK {
					granted++
				}
			}
			require.Equal(t, 3, granted, "a budget of 3, whatever the count said")
			require.NoError(t, s.rdb.Set(ctx, s.ns+":task:frac", "1.5", time.Hour).Err())
			d, err := s.st.Draw(ctx, "task:frac", 3, time.Hour)
			require.NoError(t, err)
			require.True(t, d.OK)
			require.Equal(t, int64(1), d.Used)
		})
	}
}

// The wedge: the fleet's breaker is open, the worker that takes the
// half-open probe dies before it records how the probe went, and the
// provider is healthy again. Every other worker is refused only until the
// probe's lease has passed: then one of them probes, succeeds, and the
// fleet is served again, within one cool-down plus the lease.
func TestLostProbeDoesNotWedgeTheFleet(t *testing.T) {
	rdb := redis.NewClient(redisstate.ClientOptions(redisAddr(t), testStep))
	t.Cleanup(func() { _ = rdb.Close() })
	ns := "wedge-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	st := redisstate.New(rdb, redisstate.Options{Namespace: ns, Timeout: testStep})
	stateOf := func() circuitbreaker.State {
		s, err := rdb.HGet(context.Background(), ns+":breaker:provider", "s").Int()
		require.NoError(t, err)
		return circuitbreaker.State(s)
	}
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	cfg := policies.BreakerConfig{Name: "provider", State: st, Delay: time.Minute, ProbeLease: 30 * time.Second, Clock: clk}
	dying := policies.NewCircuitBreaker[string](cfg)
	worker := policies.NewCircuitBreaker[string](cfg)

	down := errors.New("503 service unavailable")
	for range 5 {
		require.True(t, worker.TryAcquirePermit())
		worker.RecordError(down)
	}
	require.Equal(t, circuitbreaker.OpenState, stateOf())
	clk.Advance(time.Minute)
	require.True(t, dying.TryAcquirePermit(), "the dying worker takes the probe, and never records it")

	served := 0
	var servedAt time.Duration
	for step := time.Duration(0); step <= 2*time.Minute; step += 5 * time.Second {
		if worker.TryAcquirePermit() {
			worker.RecordSuccess()
			served++
			if served == 1 {
				servedAt = step
			}
		}
		clk.Advance(5 * time.Second)
	}
	require.Equal(t, 30*time.Second, servedAt, "served again once the lost probe's lease passed")
	require.Equal(t, circuitbreaker.ClosedState, stateOf())
	require.Equal(t, 19, served, "and from then on, every call")
}
