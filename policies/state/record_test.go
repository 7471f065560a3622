package state_test

import (
	"encoding/json"
	"math/rand/v2"
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

// A step NeedsTime says reads no time answers alike and leaves the same
// record at any time: over seeded random sequences of a local record's
// steps (TTL 0), each such step made at two far-apart times agrees. A
// NeedsTime that said no where the rule reads the time would fail here.
func TestNeedsTimeIsTheRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	counts := []state.Count{state.Fail, state.Success, state.Ignore}
	kinds := []state.BreakerOpKind{state.BreakerAcquire, state.BreakerAcquire, state.BreakerRecord, state.BreakerRecord, state.BreakerRecordCurrent, state.BreakerSet}
	steps := 0 // the steps that read no time
	for seq := range 200 {
		settings := state.BreakerOp{FailureThreshold: 1 + rng.IntN(4), Delay: time.Duration(1+rng.IntN(20)) * time.Second,
			HalfOpenProbes: 1 + rng.IntN(2), SuccessThreshold: 1 + rng.IntN(2)}
		if rng.IntN(2) == 0 {
			settings.ProbeLease = time.Duration(1+rng.IntN(10)) * time.Second
		}
		if rng.IntN(3) == 0 {
			settings.FailureRate, settings.MinimumCalls, settings.Window = 0.5, 1+rng.IntN(3), time.Minute
		}
		var rec state.BreakerEntry
		var held []state.BreakerView
		now := t0
		for i := range 60 {
			now = now.Add(time.Duration(rng.IntN(5000)) * time.Millisecond)
			o := settings
			o.Now = now
			o.Kind = kinds[rng.IntN(len(kinds))]
			o.Count = counts[rng.IntN(len(counts))]
			o.To = circuitbreaker.State(rng.IntN(3))
			if o.Kind == state.BreakerRecord && len(held) > 0 {
				p := held[rng.IntN(len(held))]
				o.Gen, o.Probe = p.Gen, p.Probe
			}
			timeless := !rec.NeedsTime(o)
			other := rec
			v := rec.Apply(o)
			if timeless {
				steps++
				later := o
				later.Now = now.Add(time.Duration(1+rng.IntN(1000)) * time.Hour)
				require.Equal(t, v, other.Apply(later), "sequence %d step %d: %+v answers by the time, though NeedsTime says no", seq, i, o)
				require.Equal(t, rec, other, "sequence %d step %d: %+v leaves a record by the time, though NeedsTime says no", seq, i, o)
			}
			if v.Granted {
				held = append(held, v)
			}
		}
	}
	require.Greater(t, steps, 1000, "the sequences must exercise the steps that read no time")
}
