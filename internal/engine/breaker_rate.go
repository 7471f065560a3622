package engine

import "time"

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

// rateWindow counts a closed breaker's calls and Transient failures in
// RateBuckets buckets; a slot holds the bucket whose index it last saw.
type rateWindow [RateBuckets]struct {
	idx             int64
	calls, failures int64
}

// add counts one call, a failure or not, in bucket idx.
func (w *rateWindow) add(idx int64, fail bool) {
	s := &w[slot(idx)]
	if s.idx != idx {
		s.idx, s.calls, s.failures = idx, 0, 0
	}
	s.calls++
	if fail {
		s.failures++
	}
}

// sum returns the calls and failures of the buckets within the window that
// ends with bucket idx.
func (w *rateWindow) sum(idx int64) (calls, failures int64) {
	for _, s := range w {
		if s.idx <= idx && s.idx > idx-RateBuckets {
			calls += s.calls
			failures += s.failures
		}
	}
	return calls, failures
}

func slot(idx int64) int { return int(((idx % RateBuckets) + RateBuckets) % RateBuckets) }
