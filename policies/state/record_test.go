package state_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/policies/state"
)

// An entry survives the round trip a store makes between two steps (read,
// decode, Apply, encode, write): a breaker opened by steps on decoded copies
// is the breaker one kept in memory would be.
func TestEntriesSurviveEncoding(t *testing.T) {
	now := time.Unix(1000, 0).UTC() // UTC, as it decodes
	op := state.BreakerOp{Kind: state.BreakerRecordCurrent, Now: now, FailureThreshold: 2, Delay: time.Minute,
		HalfOpenProbes: 1, SuccessThreshold: 1, TTL: time.Hour, Count: state.Fail,
		FailureRate: 0.5, MinimumCalls: 2, Window: 10 * time.Second}
	var mem state.BreakerEntry
	var blob []byte
	step := func(op state.BreakerOp) (state.BreakerView, state.BreakerView) {
		var e state.BreakerEntry
		if blob != nil {
			require.NoError(t, json.Unmarshal(blob, &e))
		}
		v := e.Apply(op)
		var err error
		blob, err = json.Marshal(&e)
		require.NoError(t, err)
		return mem.Apply(op), v
	}
	want, got := step(op)
	require.Equal(t, want, got)
	op.Now = now.Add(time.Second)
	want, got = step(op)
	require.Equal(t, want, got)
	require.Equal(t, circuitbreaker.OpenState, got.State, "2 of 2 failed")
	op.Kind, op.Now = state.BreakerAcquire, now.Add(2*time.Minute)
	want, got = step(op)
	require.Equal(t, want, got)
	require.True(t, got.Probe)

	var r state.RatioEntry
	for i := range 3 {
		v := r.Apply(state.RatioOp{Now: now.Add(time.Duration(i) * time.Second), Window: time.Minute, Ratio: 0.5})
		require.True(t, v.OK)
	}
	blob, err := json.Marshal(&r)
	require.NoError(t, err)
	var back state.RatioEntry
	require.NoError(t, json.Unmarshal(blob, &back))
	v := back.Apply(state.RatioOp{Retry: true, Now: now.Add(5 * time.Second), Window: time.Minute, Ratio: 0.5})
	require.Equal(t, state.RatioView{OK: true, Calls: 3, Retries: 1}, v)

	var c state.CountEntry
	require.True(t, c.Apply(now, 1, time.Hour).OK)
	require.False(t, c.Apply(now, 1, time.Hour).OK, "at the limit")
	require.True(t, c.Apply(now.Add(time.Hour), 1, time.Hour).OK, "expired: a new count")
}
