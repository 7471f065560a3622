// Package state is the contract of a store that the circuit breakers and
// retry budgets of a fleet share: the [State] interface and the plain types
// of its steps. A store (contrib/redis, or one of your own) implements State
// and proves it with package policies/statetest; state.Memory is
// the one in a process's memory. The rules of each step are here too, as
// records a store keeps and applies ([BreakerEntry], [CountEntry],
// [RatioEntry]), so that a store which can write a record back only if
// nobody wrote in between needs no state machine of its own.
//
// Every step is atomic on the store and every time is the caller's, so that
// workers on a fake or scaled clock decide on that clock. The arithmetic a
// store must share with every other (how a rate window is cut into buckets,
// how a sliding ratio weighs the previous window) is exported here, so that
// two stores cut time alike.
package state

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
)

// State is where breakers and budgets keep their counts when every worker of
// a fleet shares them. Each method is one atomic step on the store: it reads
// and updates the record under key in one go, so that two workers never act
// on the same stale record. Keys are logical ("breaker:search_docs"); a store
// namespaces them. Every time is the caller's clock's, so that a fleet on a
// scaled or fake clock decides on that clock.
//
// A store that cannot answer returns an error, promptly: the policy then
// decides on its local state, as a policy without a State always does, and
// the span of that decision says so (retrace.state=local and a
// retrace.state.degraded event). A State that fails or is slow never fails a
// call.
//
// contrib/redis implements it on Redis; [Memory] in one process, for workers
// that are goroutines (tests, demos, simulations); a store written elsewhere
// proves itself with package policies/statetest.
type State interface {
	// Breaker applies op to the breaker under key and returns it as op left it.
	Breaker(ctx context.Context, key string, op BreakerOp) (BreakerView, error)
	// Draw takes one unit from the count under key if fewer than limit are
	// used, and refreshes its expiry to ttl.
	Draw(ctx context.Context, key string, limit int64, ttl time.Duration) (DrawView, error)
	// Ratio records a call, or asks for a retry, in the sliding window under key.
	Ratio(ctx context.Context, key string, op RatioOp) (RatioView, error)
}

// BreakerOpKind is what a BreakerOp does.
type BreakerOpKind uint8

const (
	// BreakerAcquire asks to make a call: it half-opens an open breaker whose
	// cool-down has passed, then grants the call (closed), a probe slot (half
	// open, one free) or nothing.
	BreakerAcquire BreakerOpKind = iota + 1
	// BreakerRecord records the end of a call granted in generation Gen.
	BreakerRecord
	// BreakerRecordCurrent records the end of a call that holds no permit,
	// toward the generation the breaker is in now.
	BreakerRecordCurrent
	// BreakerSet moves the breaker to To.
	BreakerSet
)

// BreakerOp is one step of a shared breaker.
type BreakerOp struct {
	Kind BreakerOpKind
	Now  time.Time
	// The breaker's settings: every worker of one breaker should give the same.
	FailureThreshold int
	Delay            time.Duration
	HalfOpenProbes   int
	SuccessThreshold int
	// ProbeLease is how long a granted probe holds its slot: an acquire in
	// half open whose probes are all out past their lease starts a new
	// half-open generation (their ends are then stale) and grants a probe.
	// 0 → a probe holds its slot until its end is recorded.
	ProbeLease time.Duration
	// TTL: the record expires this long after the last step that changed
	// it; 0 → never (a
	// breaker's local record; a shared one is always given a TTL).
	TTL time.Duration
	// FailureRate, if above 0, opens a closed breaker when at least this
	// share of the calls recorded in the last Window failed, once the window
	// holds MinimumCalls (FailureThreshold is then ignored). The store keeps
	// the window's RateBuckets buckets in the record, indexed by
	// [RateBucket] of Now, so that the calls of the whole fleet count.
	FailureRate  float64
	MinimumCalls int
	Window       time.Duration

	Gen   uint64               // BreakerRecord: the permit's generation
	Probe bool                 // BreakerRecord: the permit holds a probe slot
	Count Count                // BreakerRecord, BreakerRecordCurrent: how the call ended
	To    circuitbreaker.State // BreakerSet
	// N (BreakerRecord, BreakerRecordCurrent) is how many ends alike the
	// step records, as N steps one after the other would; 0 → 1. A worker
	// sends the successes it held back as one step.
	N int
}

// BreakerView is a shared breaker as a step left it.
type BreakerView struct {
	State    circuitbreaker.State
	Gen      uint64
	OpenedAt time.Time // when it last opened
	Granted  bool      // BreakerAcquire: the call may go ahead
	Probe    bool      // BreakerAcquire: as a half-open probe
	Changed  bool      // the step moved the breaker from From to State
	From     circuitbreaker.State

	Executions, Failures, Successes uint // since the last transition
}

// DrawView is a count as a Draw left it.
type DrawView struct {
	OK   bool  // the unit was taken
	Used int64 // units used, the one taken included
}

// RatioOp is one step of a sliding-window retry ratio: at most Ratio retries
// per call over the last Window (and at least MinRetries however few calls).
type RatioOp struct {
	Retry bool // false: record a call; true: ask for a retry
	// Calls is how many calls the step records: without Retry 0 → 1; with
	// Retry, the calls are recorded before the retry is asked for, and
	// even when it is refused (a worker's records held back, sent with its
	// next ask).
	Calls      int
	Now        time.Time
	Window     time.Duration
	Ratio      float64
	MinRetries int
}

// RatioView is a window as a Ratio step left it.
type RatioView struct {
	OK             bool    // the retry may go ahead (always true for a call)
	Calls, Retries float64 // over the sliding window
}

// The values of Use.Policy.
const (
	PolicyBreaker = "circuit_breaker"
	PolicyBudget  = "budget"
)

// Use says where a decision of a policy with a shared State came from.
// The zero value is a policy without one.
type Use struct {
	Policy   string // PolicyBreaker or PolicyBudget; "" → the policy has no shared state
	Shared   bool   // the shared state decided; false → the local state did
	Degraded error  // why the shared state could not decide, if it could not
}

// Merge returns the use that says more: a degraded one before a healthy
// one, a policy with state before none.
func (u Use) Merge(o Use) Use {
	switch {
	case u.Degraded != nil:
		return u
	case o.Degraded != nil, u.Policy == "":
		return o
	}
	return u
}

// DegradedType is a low-cardinality word for why a shared state failed:
// "timeout" when it did not answer in time (the context's deadline, or a
// socket's), else "unavailable".
func DegradedType(err error) string {
	var t interface{ Timeout() bool }
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout() {
		return "timeout"
	}
	return "unavailable"
}

// Count is how a circuit breaker counts the end of a call.
type Count uint8

const (
	// Ignore: the call says nothing about the downstream (canceled, a bug,
	// an error no rule recognises).
	Ignore Count = iota
	// Fail: the downstream failed in a way a later call may not
	// (Transient): it counts toward opening the breaker.
	Fail
	// Success: the downstream answered, even if with a Permanent error.
	Success
)

// RateBuckets is the number of buckets a breaker's failure-rate window is
// cut into: the window holds the calls of the current bucket and of the
// RateBuckets-1 before it, so a call leaves it between 9/10 and all of
// Window after it was recorded.
const RateBuckets = 10

// RateBucket returns the index of the bucket now falls in, for a window of
// the given width: buckets are Window/RateBuckets wide (at least 1 µs),
// counted from the Unix epoch on the caller's clock, so that every worker
// of a fleet and every store cut time the same way.
func RateBucket(now time.Time, window time.Duration) int64 {
	w := max(window.Microseconds()/RateBuckets, 1)
	us := now.UnixMicro()
	idx := us / w
	if us%w != 0 && us < 0 {
		idx-- // floor, before 1970 too
	}
	return idx
}

// RateOpens reports whether a closed breaker in failure-rate mode opens:
// the window holds at least minimum calls and at least rate of them failed.
func RateOpens(calls, failures int64, rate float64, minimum int) bool {
	return calls > 0 && calls >= int64(minimum) && float64(failures) >= rate*float64(calls)
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
