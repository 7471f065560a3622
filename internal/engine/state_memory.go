package engine

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
)

// MemoryState is a State in one process's memory: the workers of a fleet
// that run as goroutines of one process share it as a fleet of processes
// shares a store. Records expire on the callers' clock. It is safe for
// concurrent use and never fails.
type MemoryState struct {
	mu       sync.Mutex
	breakers map[string]*breakerRecord
	counts   map[string]*countRecord
	ratios   map[string]*ratioRecord
	steps    int
}

// NewMemoryState returns an empty MemoryState.
func NewMemoryState() *MemoryState {
	return &MemoryState{breakers: map[string]*breakerRecord{}, counts: map[string]*countRecord{}, ratios: map[string]*ratioRecord{}}
}

var _ State = (*MemoryState)(nil)

// breakerRecord is a shared breaker's record: the fields a store keeps.
type breakerRecord struct {
	state       circuitbreaker.State
	gen         uint64
	consecutive int
	window      rateWindow
	openedAt    time.Time
	probes      int
	probeOK     int
	leaseUntil  time.Time // when the last probe granted loses its slot
	executions  uint
	failures    uint
	successes   uint
	expires     time.Time
}

// apply is a shared breaker's state machine, step by step the same as
// Breaker's local one (a store written in another language implements the
// same rules; the conformance tests hold both to them).
func (r *breakerRecord) apply(op BreakerOp) BreakerView {
	v := BreakerView{}
	transition := func(to circuitbreaker.State) {
		if r.state == to {
			return
		}
		v.Changed, v.From = true, r.state
		r.state = to
		r.gen++
		r.consecutive, r.probes, r.probeOK = 0, 0, 0
		r.window = rateWindow{}
		r.executions, r.failures, r.successes = 0, 0, 0
		if to == circuitbreaker.OpenState {
			r.openedAt = op.Now
		}
	}
	switch op.Kind {
	case BreakerAcquire:
		if r.state == circuitbreaker.OpenState && !op.Now.Before(r.openedAt.Add(op.Delay)) {
			transition(circuitbreaker.HalfOpenState)
		}
		switch r.state {
		case circuitbreaker.ClosedState:
			v.Granted = true
		case circuitbreaker.HalfOpenState:
			if r.probes >= op.HalfOpenProbes && op.ProbeLease > 0 && !op.Now.Before(r.leaseUntil) {
				// The probes out are lost: a new half-open generation.
				r.gen++
				r.probes, r.probeOK = 0, 0
			}
			if r.probes < op.HalfOpenProbes {
				r.probes++
				r.leaseUntil = op.Now.Add(op.ProbeLease)
				v.Granted, v.Probe = true, true
			}
		}
	case BreakerRecord, BreakerRecordCurrent:
		gen, probe := op.Gen, op.Probe
		if op.Kind == BreakerRecordCurrent {
			gen, probe = r.gen, r.state == circuitbreaker.HalfOpenState && r.probes > 0
		}
		if gen != r.gen {
			break // granted in a state the breaker has left
		}
		if probe {
			r.probes--
		}
		switch op.Count {
		case Fail:
			r.executions++
			r.failures++
			switch r.state {
			case circuitbreaker.ClosedState:
				if op.FailureRate > 0 {
					idx := RateBucket(op.Now, op.Window)
					r.window.add(idx, true)
					if calls, failures := r.window.sum(idx); RateOpens(calls, failures, op.FailureRate, op.MinimumCalls) {
						transition(circuitbreaker.OpenState)
					}
					break
				}
				r.consecutive++
				if r.consecutive >= op.FailureThreshold {
					transition(circuitbreaker.OpenState)
				}
			case circuitbreaker.HalfOpenState:
				transition(circuitbreaker.OpenState)
			}
		case Success:
			r.executions++
			r.successes++
			switch r.state {
			case circuitbreaker.ClosedState:
				r.consecutive = 0
				if op.FailureRate > 0 {
					r.window.add(RateBucket(op.Now, op.Window), false)
				}
			case circuitbreaker.HalfOpenState:
				r.probeOK++
				if r.probeOK >= op.SuccessThreshold {
					transition(circuitbreaker.ClosedState)
				}
			}
		}
	case BreakerSet:
		transition(op.To)
	}
	r.expires = op.Now.Add(op.TTL)
	v.State, v.Gen, v.OpenedAt = r.state, r.gen, r.openedAt
	v.Executions, v.Failures, v.Successes = r.executions, r.failures, r.successes
	return v
}

// Breaker implements State.
func (m *MemoryState) Breaker(_ context.Context, key string, op BreakerOp) (BreakerView, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sweep(m, m.breakers, op.Now, func(r *breakerRecord) time.Time { return r.expires })
	r := m.breakers[key]
	if r == nil || !op.Now.Before(r.expires) {
		r = &breakerRecord{}
		m.breakers[key] = r
	}
	return r.apply(op), nil
}

type countRecord struct {
	used    int64
	expires time.Time
}

// Draw implements State. A count expires ttl after its last draw, measured
// on the wall clock, as a store's would be.
func (m *MemoryState) Draw(_ context.Context, key string, limit int64, ttl time.Duration) (DrawView, error) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	sweep(m, m.counts, now, func(r *countRecord) time.Time { return r.expires })
	r := m.counts[key]
	if r == nil || !now.Before(r.expires) {
		r = &countRecord{}
		m.counts[key] = r
	}
	if r.used >= limit {
		return DrawView{Used: r.used}, nil
	}
	r.used++
	r.expires = now.Add(ttl)
	return DrawView{OK: true, Used: r.used}, nil
}

type ratioRecord struct {
	window         int64 // the current window's index
	calls, retries float64
	prevCalls      float64 // the window before it
	prevRetries    float64
	expires        time.Time
}

// RatioWindow returns the index of the window at now, and how far into it
// now is, from 0 to 1.
func RatioWindow(now time.Time, window time.Duration) (int64, float64) {
	us, w := now.UnixMicro(), max(window.Microseconds(), 1)
	idx := int64(math.Floor(float64(us) / float64(w)))
	return idx, float64(us-idx*w) / float64(w)
}

// RatioAllows reports whether one more retry fits: the retries over the
// sliding window, that one included, stay within ratio × calls, or within
// minRetries.
func RatioAllows(calls, retries, ratio float64, minRetries int) bool {
	return retries+1 <= max(float64(minRetries), ratio*calls)
}

// Ratio implements State. The sliding window weighs the previous window's
// counts by the part of it still inside the window.
func (m *MemoryState) Ratio(_ context.Context, key string, op RatioOp) (RatioView, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sweep(m, m.ratios, op.Now, func(r *ratioRecord) time.Time { return r.expires })
	idx, into := RatioWindow(op.Now, op.Window)
	r := m.ratios[key]
	if r == nil || !op.Now.Before(r.expires) {
		r = &ratioRecord{window: idx}
		m.ratios[key] = r
	}
	switch {
	case idx == r.window+1:
		r.prevCalls, r.prevRetries, r.calls, r.retries = r.calls, r.retries, 0, 0
	case idx > r.window+1:
		r.prevCalls, r.prevRetries, r.calls, r.retries = 0, 0, 0, 0
	}
	r.window = max(r.window, idx)
	weight := 1 - into
	calls, retries := r.calls+r.prevCalls*weight, r.retries+r.prevRetries*weight
	v := RatioView{OK: true}
	if !op.Retry {
		r.calls++
		calls++
	} else if RatioAllows(calls, retries, op.Ratio, op.MinRetries) {
		r.retries++
		retries++
	} else {
		v.OK = false
	}
	r.expires = op.Now.Add(2 * op.Window)
	v.Calls, v.Retries = calls, retries
	return v, nil
}

// sweep drops the expired records of recs every 1024 steps, so that keys no
// worker uses any more (finished tasks, old breakers) do not accumulate. Each
// kind of record expires on its own time: the callers' clock, or the wall
// clock for task counts.
func sweep[R any](m *MemoryState, recs map[string]*R, now time.Time, expires func(*R) time.Time) {
	m.steps++
	if m.steps%1024 != 0 {
		return
	}
	for k, r := range recs {
		if !now.Before(expires(r)) {
			delete(recs, k)
		}
	}
}
