package middleware

import (
	"context"
	"sync/atomic"
)

// foreignRetry is a retry loop that retrace does not drive but that encloses
// retrace layers, such as an agent framework's retry around its model call:
// each layer started beneath it is one of its attempts.
type foreignRetry struct {
	carried atomic.Int64 // the worst case already added to the enclosing layer's attempt
}

// WithinRetry returns a context in which each layer call is one attempt of a
// retry loop that encloses it and that retrace does not drive: named name,
// making up to attempts calls (an agent framework's model retry, which calls
// the layers it wraps once per attempt). The loop counts in
// retrace.retry.depth, in retrace.calls.worst_case (attempts times its
// costliest attempt) and in the nested-retry event ("eino.ModelRetry(3) ×
// session(4)"), so that the trace shows the multiplication before it
// happens. Call it once per call of the loop, not per attempt. attempts 0
// or less is a loop without a limit: the worst case is unknown, and the
// event says so ("temporal(?) × session(4)").
//
// The loop has no span of its own, and its calls count into the layer that
// encloses it: outside any layer, or with 1 attempt (no loop), ctx is
// returned as it is.
func WithinRetry(ctx context.Context, name string, attempts int) context.Context {
	return withinRetry(ctx, name, attempts, true)
}

// WithinRetryAttempt returns a context that is one whole attempt of a
// retry loop that encloses it and that retrace does not drive, named name,
// making up to attempts attempts (0 or less: without a limit): a durable
// execution engine's retry of an activity, each of whose attempts runs the
// activity once, however many layer calls it makes. It counts as
// [WithinRetry] does, but the layer calls made in ctx add up: the loop's
// worst case is attempts times their sum. Call it once per attempt.
func WithinRetryAttempt(ctx context.Context, name string, attempts int) context.Context {
	return withinRetry(ctx, name, attempts, false)
}

func withinRetry(ctx context.Context, name string, attempts int, perCall bool) context.Context {
	parent := frameFrom(ctx)
	if parent == nil || attempts == 1 {
		return ctx
	}
	f := &frame{foreign: &foreignRetry{}}
	f.init(parent, name, max(attempts, 0), true, nil)
	// perCall: each layer beneath is one attempt, and the costliest counts,
	// not their sum; else all of them are one attempt, and they add up.
	f.perAttempt = perCall
	return &frameCtx{Context: ctx, f: f}
}

// carryWorst adds what the loop's worst case has grown by to the enclosing
// layer's current attempt. The loop has no end that retrace sees, so it
// reports as each attempt ends; its worst case only grows.
func (f *frame) carryWorst() {
	w := f.worst()
	if w < 0 {
		f.parent.unknown.Store(true)
		return
	}
	for {
		old := f.foreign.carried.Load()
		if w <= old {
			return
		}
		if f.foreign.carried.CompareAndSwap(old, w) {
			if f.parent.perAttempt {
				for cur := f.parent.childSum.Load(); w > cur && !f.parent.childSum.CompareAndSwap(cur, w); cur = f.parent.childSum.Load() {
				}
			} else {
				f.parent.childSum.Add(w - old)
			}
			return
		}
	}
}
