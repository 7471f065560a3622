package state

import (
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
)

// A store that can read a record and write it back only if nobody wrote in
// between (compare-and-swap, a transaction, a lock) needs no state machine
// of its own: it keeps these entries (BreakerEntry, CountEntry, RatioEntry), encoded as it likes (their fields are
// exported for encoding/json and the like), and makes each step of State
// one Apply between its read and its write. A store that runs the step
// where the data is (a Redis script) implements the same rules in its own
// language; package statetest holds both to them.

// BreakerEntry is the record of a shared breaker.
type BreakerEntry struct {
	State       circuitbreaker.State
	Gen         uint64
	Consecutive int        // Transient failures in a row, while closed
	Window      RateWindow // calls and failures while closed, with FailureRate
	OpenedAt    time.Time
	Probes      int       // probe slots out, while half open
	ProbeOK     int       // successful probes, while half open
	LeaseUntil  time.Time // when the last probe granted loses its slot
	Executions  uint      // since the last transition
	Failures    uint
	Successes   uint
	Expires     time.Time
}

// Live reports whether the record still holds at now: an expired record is
// a closed breaker that has seen nothing.
func (r *BreakerEntry) Live(now time.Time) bool { return now.Before(r.Expires) }

// NeedsTime reports whether op's step on the record reads op.Now: a step
// that does not gives the same answer and leaves the same record at any
// time, so that a local breaker on its hot path (a call through a closed
// breaker that succeeds, or fails short of its threshold) need not read a
// clock. It errs on the side of yes; statetest's rule check holds it to
// the rule.
func (r *BreakerEntry) NeedsTime(op BreakerOp) bool {
	if op.TTL > 0 || op.Kind == BreakerSet {
		return true
	}
	closed := r.State == circuitbreaker.ClosedState
	switch op.Kind {
	case BreakerAcquire:
		return !closed
	case BreakerRecord, BreakerRecordCurrent:
		switch op.Count {
		case Fail:
			// A failure opens a half-open breaker, and a closed one at its
			// threshold or, with a rate, counts in the window.
			return r.State == circuitbreaker.HalfOpenState ||
				closed && (op.FailureRate > 0 || r.Consecutive+1 >= op.FailureThreshold)
		case Success:
			return closed && op.FailureRate > 0
		}
	}
	return false
}

// Apply makes op's step on the record and returns the breaker as the step
// left it: the rules of [State.Breaker], step by step the same as a local
// breaker's.
func (r *BreakerEntry) Apply(op BreakerOp) BreakerView {
	if op.TTL > 0 && !r.Live(op.Now) {
		*r = BreakerEntry{}
	}
	// A step that changes nothing (a refusal, a closed breaker's grant, a
	// stale end) writes nothing, its expiry included: a store then need
	// not write either.
	// A local record (no TTL) keeps no expiry: it needs no copy to
	// compare with.
	var before BreakerEntry
	if op.TTL > 0 {
		before = *r
	}
	v := BreakerView{}
	transition := func(to circuitbreaker.State) {
		if r.State == to {
			return
		}
		v.Changed, v.From = true, r.State
		r.State = to
		r.Gen++
		r.Consecutive, r.Probes, r.ProbeOK = 0, 0, 0
		r.Window = RateWindow{}
		r.Executions, r.Failures, r.Successes = 0, 0, 0
		if to == circuitbreaker.OpenState {
			r.OpenedAt = op.Now
		}
	}
	switch op.Kind {
	case BreakerAcquire:
		if r.State == circuitbreaker.OpenState && !op.Now.Before(r.OpenedAt.Add(op.Delay)) {
			transition(circuitbreaker.HalfOpenState)
		}
		switch r.State {
		case circuitbreaker.ClosedState:
			v.Granted = true
		case circuitbreaker.HalfOpenState:
			if r.Probes >= op.HalfOpenProbes && op.ProbeLease > 0 && !op.Now.Before(r.LeaseUntil) {
				// The probes out are lost: a new half-open generation.
				r.Gen++
				r.Probes, r.ProbeOK = 0, 0
			}
			if r.Probes < op.HalfOpenProbes {
				r.Probes++
				r.LeaseUntil = op.Now.Add(op.ProbeLease)
				v.Granted, v.Probe = true, true
			}
		}
	case BreakerRecord, BreakerRecordCurrent:
		for range max(op.N, 1) {
			r.record(op, transition)
		}
	case BreakerSet:
		transition(op.To)
	}
	if op.TTL > 0 && *r != before {
		r.Expires = op.Now.Add(op.TTL)
	}
	v.State, v.Gen, v.OpenedAt = r.State, r.Gen, r.OpenedAt
	v.Executions, v.Failures, v.Successes = r.Executions, r.Failures, r.Successes
	return v
}

// record makes one end of op's record step: one of its N.
func (r *BreakerEntry) record(op BreakerOp, transition func(circuitbreaker.State)) {
	gen, probe := op.Gen, op.Probe
	if op.Kind == BreakerRecordCurrent {
		gen, probe = r.Gen, r.State == circuitbreaker.HalfOpenState && r.Probes > 0
	}
	if gen != r.Gen {
		return // granted in a state the breaker has left
	}
	if probe && r.Probes > 0 {
		// A slot freed once stays freed: the end of a call that
		// holds no permit may have freed this one's already.
		r.Probes--
	}
	switch op.Count {
	case Fail:
		r.Executions++
		r.Failures++
		switch r.State {
		case circuitbreaker.ClosedState:
			if op.FailureRate > 0 {
				idx := RateBucket(op.Now, op.Window)
				r.Window.Add(idx, true)
				if calls, failures := r.Window.Sum(idx); RateOpens(calls, failures, op.FailureRate, op.MinimumCalls) {
					transition(circuitbreaker.OpenState)
				}
				break
			}
			r.Consecutive++
			if r.Consecutive >= op.FailureThreshold {
				transition(circuitbreaker.OpenState)
			}
		case circuitbreaker.HalfOpenState:
			transition(circuitbreaker.OpenState)
		}
	case Success:
		r.Executions++
		r.Successes++
		switch r.State {
		case circuitbreaker.ClosedState:
			r.Consecutive = 0
			if op.FailureRate > 0 {
				r.Window.Add(RateBucket(op.Now, op.Window), false)
			}
		case circuitbreaker.HalfOpenState:
			r.ProbeOK++
			if r.ProbeOK >= op.SuccessThreshold {
				transition(circuitbreaker.ClosedState)
			}
		}
	}
}

// RateWindow counts a closed breaker's calls and Transient failures in
// RateBuckets buckets; a slot holds the bucket whose index it last saw.
type RateWindow [RateBuckets]RateSlot

// RateSlot is one bucket of a RateWindow.
type RateSlot struct {
	Idx             int64 // the bucket's index, as RateBucket returns it
	Calls, Failures int64
}

// Add counts one call, a failure or not, in bucket idx.
func (w *RateWindow) Add(idx int64, fail bool) {
	s := &w[((idx%RateBuckets)+RateBuckets)%RateBuckets]
	if s.Idx != idx {
		*s = RateSlot{Idx: idx}
	}
	s.Calls++
	if fail {
		s.Failures++
	}
}

// Sum returns the calls and failures of the buckets within the window that
// ends with bucket idx.
func (w *RateWindow) Sum(idx int64) (calls, failures int64) {
	for _, s := range w {
		if s.Idx <= idx && s.Idx > idx-RateBuckets {
			calls += s.Calls
			failures += s.Failures
		}
	}
	return calls, failures
}

// CountEntry is the record of a Draw count. It expires on the wall clock,
// ttl after its last draw: a task's count outlives any one caller's clock.
type CountEntry struct {
	Used    int64
	Expires time.Time
}

// Apply draws one unit at now if fewer than limit are used, the rules of
// [State.Draw].
func (r *CountEntry) Apply(now time.Time, limit int64, ttl time.Duration) DrawView {
	if !now.Before(r.Expires) {
		*r = CountEntry{}
	}
	if r.Used >= limit {
		return DrawView{Used: r.Used}
	}
	r.Used++
	r.Expires = now.Add(ttl)
	return DrawView{OK: true, Used: r.Used}
}

// RatioEntry is the record of a sliding-window retry ratio: the counts of
// the current window and of the one before it, which the sliding window
// weighs by the part of it still inside.
type RatioEntry struct {
	Window                 int64 // the current window's index, as RatioWindow returns it
	Calls, Retries         float64
	PrevCalls, PrevRetries float64
	Expires                time.Time
}

// Apply makes op's step on the record, the rules of [State.Ratio]. The
// record expires two windows after its last step: by then nothing in it
// counts.
func (r *RatioEntry) Apply(op RatioOp) RatioView {
	idx, into := RatioWindow(op.Now, op.Window)
	if !op.Now.Before(r.Expires) {
		*r = RatioEntry{Window: idx}
	}
	switch {
	case idx == r.Window+1:
		r.PrevCalls, r.PrevRetries, r.Calls, r.Retries = r.Calls, r.Retries, 0, 0
	case idx > r.Window+1:
		r.PrevCalls, r.PrevRetries, r.Calls, r.Retries = 0, 0, 0, 0
	}
	r.Window = max(r.Window, idx)
	weight := 1 - into
	calls, retries := r.Calls+r.PrevCalls*weight, r.Retries+r.PrevRetries*weight
	v := RatioView{OK: true}
	n := float64(op.Calls)
	if !op.Retry {
		n = float64(max(op.Calls, 1))
	}
	r.Calls += n
	calls += n
	switch {
	case !op.Retry:
	case RatioAllows(calls, retries, op.Ratio, op.MinRetries):
		r.Retries++
		retries++
	default:
		// A refused retry counts nothing, and writes nothing but the calls
		// it carries.
		v.OK = false
		if n > 0 {
			r.Expires = op.Now.Add(2 * op.Window)
		}
		v.Calls, v.Retries = calls, retries
		return v
	}
	r.Expires = op.Now.Add(2 * op.Window)
	v.Calls, v.Retries = calls, retries
	return v
}
