package engine

import (
	"context"
	"sync"
	"time"

	"github.com/retrace-go/retrace/policies/state"
)

// MemoryState is a State in one process's memory: the workers of a fleet
// that run as goroutines of one process share it as a fleet of processes
// shares a store. Each step is one Apply of package state's records under
// one mutex. Records expire on the callers' clock (a Draw count on the
// wall clock). It is safe for concurrent use and never fails.
type MemoryState struct {
	mu       sync.Mutex
	breakers map[string]*state.BreakerEntry
	counts   map[string]*state.CountEntry
	ratios   map[string]*state.RatioEntry
	steps    int
}

// NewMemoryState returns an empty MemoryState.
func NewMemoryState() *MemoryState {
	return &MemoryState{breakers: map[string]*state.BreakerEntry{}, counts: map[string]*state.CountEntry{}, ratios: map[string]*state.RatioEntry{}}
}

var _ state.State = (*MemoryState)(nil)

// Breaker implements State.
func (m *MemoryState) Breaker(_ context.Context, key string, op state.BreakerOp) (state.BreakerView, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return record(m, m.breakers, key, op.Now, func(r *state.BreakerEntry) time.Time { return r.Expires }).Apply(op), nil
}

// Draw implements State.
func (m *MemoryState) Draw(_ context.Context, key string, limit int64, ttl time.Duration) (state.DrawView, error) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return record(m, m.counts, key, now, func(r *state.CountEntry) time.Time { return r.Expires }).Apply(now, limit, ttl), nil
}

// Ratio implements State.
func (m *MemoryState) Ratio(_ context.Context, key string, op state.RatioOp) (state.RatioView, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return record(m, m.ratios, key, op.Now, func(r *state.RatioEntry) time.Time { return r.Expires }).Apply(op), nil
}

// record returns the record under key, made if missing. Every 1024 steps it
// first drops the records expired at now, so that keys no worker uses any
// more (finished tasks, old breakers) do not accumulate.
func record[R any](m *MemoryState, recs map[string]*R, key string, now time.Time, expires func(*R) time.Time) *R {
	m.steps++
	if m.steps%1024 == 0 {
		for k, r := range recs {
			if !now.Before(expires(r)) {
				delete(recs, k)
			}
		}
	}
	r := recs[key]
	if r == nil {
		r = new(R)
		recs[key] = r
	}
	return r
}
