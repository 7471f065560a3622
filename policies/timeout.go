package policies

import (
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/common"
	"github.com/failsafe-go/failsafe-go/policy"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
)

// Timeout is the per-attempt timeout [NewTimeout] builds.
type Timeout[R any] struct {
	exec *timeoutExecutor[R]
}

// NewTimeout builds a timeout that cancels an attempt's context after limit
// (of clk's time; nil → the layer's clock, else the wall clock) and fails the
// attempt with an *[Error] of type attempt_timeout, which is Transient and matches
// timeout.ErrExceeded. Placed after a retry policy it bounds each attempt;
// before it, the whole call.
func NewTimeout[R any](limit time.Duration, clk clock.Clock) *Timeout[R] {
	return &Timeout[R]{exec: &timeoutExecutor[R]{limit: limit, clk: clk}}
}

// Limit is the time an attempt may take.
func (t *Timeout[R]) Limit() time.Duration { return t.exec.limit }

// ResultAgnostic implements failsafe.ResultAgnosticPolicy.
func (*Timeout[R]) ResultAgnostic() {}

// ToExecutor implements failsafe.Policy.
func (t *Timeout[R]) ToExecutor(_ R) any { return t.exec }

// timeoutExecutor runs the timeout inside failsafe.With, and is how package
// middleware finds its limit and clock.
type timeoutExecutor[R any] struct {
	limit time.Duration
	clk   clock.Clock
}

// Limit is the time an attempt may take.
func (e *timeoutExecutor[R]) Limit() time.Duration { return e.limit }

// Clock is the timeout's own clock, nil if it has none (the layer's is
// used).
func (e *timeoutExecutor[R]) Clock() clock.Clock { return e.clk }

func (e *timeoutExecutor[R]) Apply(inner func(failsafe.Execution[R]) *common.PolicyResult[R]) func(failsafe.Execution[R]) *common.PolicyResult[R] {
	return func(exec failsafe.Execution[R]) *common.PolicyResult[R] {
		ex := exec.(policy.ExecutionInternal[R]).CopyForCancellable().(policy.ExecutionInternal[R])
		var result atomic.Pointer[common.PolicyResult[R]]
		timer := engine.Or(e.clk).AfterFunc(e.limit, func() {
			r := &common.PolicyResult[R]{Error: timedOut(e.limit, nil), Done: true}
			if result.CompareAndSwap(nil, r) {
				ex.Cancel(r)
			}
		})
		if result.CompareAndSwap(nil, inner(ex)) {
			timer.Stop()
			ex.Cancel(nil)
		}
		return result.Load()
	}
}

// Expired is the error of an attempt that this timeout cut, wrapping what
// the handler returned when it was cut.
func (e *timeoutExecutor[R]) Expired(err error) error { return timedOut(e.limit, err) }

// timedOut is an attempt cut by a per-attempt timeout of the layer's own
// after limit: Transient, unlike the caller's deadline, and a match for
// timeout.ErrExceeded.
func timedOut(limit time.Duration, err error) *Error {
	return &Error{Class: Transient, Type: typeAttemptTimeout, Reason: "attempt timeout",
		Message: "attempt timed out after " + limit.String(), Err: err}
}
