package policies

import (
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/common"
	"github.com/failsafe-go/failsafe-go/policy"

	"github.com/retrace-go/retrace/clock"
)

// Timeout is the per-attempt timeout [NewTimeout] builds.
type Timeout[R any] struct {
	limit time.Duration
	clk   clock.Clock
}

// NewTimeout builds a timeout that cancels an attempt's context after limit
// (of clk's time; nil → the wall clock) and fails the attempt with a
// *[TimeoutError], which is Transient and matches timeout.ErrExceeded. Placed
// after a retry policy it bounds each attempt; before it, the whole call.
func NewTimeout[R any](limit time.Duration, clk clock.Clock) failsafe.Policy[R] {
	return &Timeout[R]{limit: limit, clk: clk}
}

// Limit is the time an attempt may take.
func (t *Timeout[R]) Limit() time.Duration { return t.limit }

// Clock is the clock the timeout runs on, nil for the default.
func (t *Timeout[R]) Clock() clock.Clock { return t.clk }

// ResultAgnostic implements failsafe.ResultAgnosticPolicy.
func (*Timeout[R]) ResultAgnostic() {}

// ToExecutor implements failsafe.Policy.
func (t *Timeout[R]) ToExecutor(_ R) any { return timeoutExecutor[R]{t} }

type timeoutExecutor[R any] struct{ t *Timeout[R] }

func (e timeoutExecutor[R]) Apply(inner func(failsafe.Execution[R]) *common.PolicyResult[R]) func(failsafe.Execution[R]) *common.PolicyResult[R] {
	return func(exec failsafe.Execution[R]) *common.PolicyResult[R] {
		ex := exec.(policy.ExecutionInternal[R]).CopyForCancellable().(policy.ExecutionInternal[R])
		var result atomic.Pointer[common.PolicyResult[R]]
		timer := clockOr(e.t.clk).AfterFunc(e.t.limit, func() {
			r := &common.PolicyResult[R]{Error: &TimeoutError{After: e.t.limit}, Done: true}
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
