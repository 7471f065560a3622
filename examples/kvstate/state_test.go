package kvstate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/policies/statetest"

	"example.com/kvstate"
)

func TestConformance(t *testing.T) {
	statetest.Run(t, func(*testing.T) state.State { return &kvstate.Store{KV: kvstate.NewMemKV(), Prefix: "t:"} })
}

// Two workers' breakers on one store open for both after the failures of
// one, and let one probe through for the fleet.
func TestFleetBreaker(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	st := &kvstate.Store{KV: kvstate.NewMemKV(), Prefix: "fleet:"}
	cfg := policies.BreakerConfig{Name: "search_docs", FailureThreshold: 3, Delay: time.Minute, Clock: clk, State: st}
	a, b := policies.NewCircuitBreaker[any](cfg), policies.NewCircuitBreaker[any](cfg)
	for range 3 {
		require.True(t, a.TryAcquirePermit())
		a.RecordFailure()
	}
	require.False(t, b.TryAcquirePermit(), "worker b sees what worker a opened")
	clk.Advance(time.Minute)
	require.True(t, b.TryAcquirePermit(), "b takes the probe")
	require.False(t, a.TryAcquirePermit(), "one probe for the fleet")
	b.RecordSuccess()
	require.True(t, a.TryAcquirePermit(), "closed for the fleet")
	require.True(t, a.IsClosed())
}

// A store that is down, or an entry that does not decode, is an error the
// policy decides around; nothing panics.
func TestBadEntriesAndOutages(t *testing.T) {
	kv := kvstate.NewMemKV()
	ok, err := kv.CompareAndSwap(context.Background(), "x:breaker:p", 0, []byte("not json"))
	require.NoError(t, err)
	require.True(t, ok)
	st := &kvstate.Store{KV: kv, Prefix: "x:"}
	_, err = st.Breaker(context.Background(), "breaker:p", state.BreakerOp{Kind: state.BreakerAcquire, Now: time.Now()})
	require.ErrorContains(t, err, "does not decode")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = st.Draw(ctx, "task:a", 1, time.Hour)
	require.True(t, errors.Is(err, context.Canceled))

	cb := policies.NewCircuitBreaker[any](policies.BreakerConfig{Name: "p", State: st})
	require.True(t, cb.TryAcquirePermit(), "the garbage entry: the breaker decides on its local state")
}
