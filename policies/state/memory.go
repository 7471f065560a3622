package state

import (
	"context"
	"sync"
	"time"
)

// Memory is a [State] in one process's memory: the workers of a fleet that
// run as goroutines of one process (tests, demos, simulations) share it as a
// fleet of processes shares a store. Each step is one Apply of this
// package's records under one mutex. Records expire on the callers' clock (a Draw count on the
// wall clock). It is safe for concurrent use and never fails.
type Memory struct {
	mu       sync.Mutex
	breakers map[string]*BreakerEntry
	counts   map[string]*CountEntry
	ratios   map[string]*RatioEntry
	steps    int
}

// NewMemory returns an empty Memory, shared by every policy given it.
func NewMemory() *Memory {
	return &Memory{breakers: map[string]*BreakerEntry{}, counts: map[string]*CountEntry{}, ratios: map[string]*RatioEntry{}}
}

var _ State = (*Memory)(nil)

// Breaker implements State.
func (m *Memory) Breaker(_ context.Context, key string, op BreakerOp) (BreakerView, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return record(m, m.breakers, key, op.Now, func(r *BreakerEntry) time.Time { return r.Expires }).Apply(op), nil
}

// Draw implements State.
func (m *Memory) Draw(_ context.Context, key string, limit int64, ttl time.Duration) (DrawView, error) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return record(m, m.counts, key, now, func(r *CountEntry) time.Time { return r.Expires }).Apply(now, limit, ttl), nil
}

// Ratio implements State.
func (m *Memory) Ratio(_ context.Context, key string, op RatioOp) (RatioView, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return record(m, m.ratios, key, op.Now, func(r *RatioEntry) time.Time { return r.Expires }).Apply(op), nil
}

// record returns the record under key, made if missing. Every 1024 steps it
// first drops the records expired at now, so that keys no worker uses any
// more (finished tasks, old breakers) do not accumulate.
func record[R any](m *Memory, recs map[string]*R, key string, now time.Time, expires func(*R) time.Time) *R {
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
