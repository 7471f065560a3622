package policies

import (
	"context"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/common"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
)

// Bulkhead is the bulkhead [NewBulkhead] builds. It is safe for concurrent
// use.
type Bulkhead[R any] struct {
	exec *bulkheadExecutor[R]
}

// NewBulkhead builds a bulkhead that lets maxConcurrent calls run at once
// (at least 1) and makes others wait up to maxWait for a slot (0: no wait)
// before it rejects them with a *[Error] of type bulkhead_full that matches
// bulkhead.ErrFull. The wait runs on the layer's clock
// (middleware.WithClock), else the wall clock.
func NewBulkhead[R any](maxConcurrent int, maxWait time.Duration) *Bulkhead[R] {
	return &Bulkhead[R]{exec: &bulkheadExecutor[R]{b: engine.NewBulkhead(maxConcurrent, maxWait)}}
}

// MaxConcurrent is the number of calls that may run at once.
func (b *Bulkhead[R]) MaxConcurrent() int { return b.exec.b.Size() }

// MaxWait is how long a call waits for a slot before it is rejected.
func (b *Bulkhead[R]) MaxWait() time.Duration { return b.exec.b.MaxWait }

// ResultAgnostic implements failsafe.ResultAgnosticPolicy.
func (*Bulkhead[R]) ResultAgnostic() {}

// ToExecutor implements failsafe.Policy.
func (b *Bulkhead[R]) ToExecutor(_ R) any { return b.exec }

// bulkheadExecutor runs the bulkhead inside failsafe.With, and is how
// package middleware finds its engine.
type bulkheadExecutor[R any] struct{ b *engine.Bulkhead }

// Engine returns the bulkhead's slots.
func (e *bulkheadExecutor[R]) Engine() *engine.Bulkhead { return e.b }

// Acquire takes a slot on clk, or returns why it could not: a
// rejection (type bulkhead_full) when none freed in time, the context's cause when ctx ended.
func (e *bulkheadExecutor[R]) Acquire(ctx context.Context, clk clock.Clock) error {
	ok, err := e.b.Acquire(ctx, clk)
	switch {
	case ok:
		return nil
	case err != nil:
		return err
	}
	return rejection(typeBulkheadFull, "", 0, bulkhead.ErrFull)
}

func (e *bulkheadExecutor[R]) Apply(inner func(failsafe.Execution[R]) *common.PolicyResult[R]) func(failsafe.Execution[R]) *common.PolicyResult[R] {
	return func(exec failsafe.Execution[R]) *common.PolicyResult[R] {
		if err := e.Acquire(exec.Context(), nil); err != nil {
			return &common.PolicyResult[R]{Error: err, Done: true}
		}
		defer e.b.Release()
		return inner(exec)
	}
}
