package kvstate

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/retrace-go/retrace/policies/state"
)

// Store is a state.State on a KV. Keys are namespaced by Prefix.
type Store struct {
	KV     KV
	Prefix string
	// Now is the clock Draw counts expire on; nil → time.Now. Breakers and
	// ratios expire on the time their steps carry.
	Now func() time.Time
}

var _ state.State = (*Store)(nil)

// maxRaces is how many times a step reads again after losing a race before
// it gives up: a policy whose State errs decides locally, which is better
// than a worker spinning on a key the fleet is hammering.
const maxRaces = 64

// step reads the entry under key, applies apply to it and writes it back if
// nobody wrote in between; else it starts over on the newer entry.
func step[E any, V any](ctx context.Context, s *Store, key string, apply func(*E) V) (V, error) {
	key = s.Prefix + key
	var zero V
	for range maxRaces {
		blob, ver, err := s.KV.Get(ctx, key)
		if err != nil {
			return zero, err
		}
		var e E
		if ver != 0 {
			if err := json.Unmarshal(blob, &e); err != nil {
				return zero, fmt.Errorf("kvstate: the entry under %q does not decode: %w", key, err)
			}
		}
		v := apply(&e)
		if blob, err = json.Marshal(&e); err != nil {
			return zero, err
		}
		ok, err := s.KV.CompareAndSwap(ctx, key, ver, blob)
		if err != nil {
			return zero, err
		}
		if ok {
			return v, nil
		}
	}
	return zero, fmt.Errorf("kvstate: %q lost %d races in a row", key, maxRaces)
}

// Breaker implements state.State.
func (s *Store) Breaker(ctx context.Context, key string, op state.BreakerOp) (state.BreakerView, error) {
	return step(ctx, s, key, func(e *state.BreakerEntry) state.BreakerView { return e.Apply(op) })
}

// Draw implements state.State.
func (s *Store) Draw(ctx context.Context, key string, limit int64, ttl time.Duration) (state.DrawView, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	return step(ctx, s, key, func(e *state.CountEntry) state.DrawView { return e.Apply(now(), limit, ttl) })
}

// Ratio implements state.State.
func (s *Store) Ratio(ctx context.Context, key string, op state.RatioOp) (state.RatioView, error) {
	return step(ctx, s, key, func(e *state.RatioEntry) state.RatioView { return e.Apply(op) })
}
