package policies

import (
	"context"
	"errors"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/bulkhead"
)

// Bulkhead is the bulkhead [NewBulkhead] builds: failsafe-go's, with its
// limits readable.
type Bulkhead[R any] struct {
	bulkhead.Bulkhead[R]
	maxConcurrent int
	maxWait       time.Duration
}

// NewBulkhead builds a bulkhead that lets maxConcurrent calls run at once
// (at least 1) and makes others wait up to maxWait for a slot (0: no wait)
// before it rejects them with an error that matches bulkhead.ErrFull.
func NewBulkhead[R any](maxConcurrent int, maxWait time.Duration) failsafe.Policy[R] {
	maxConcurrent = max(maxConcurrent, 1)
	return &Bulkhead[R]{
		Bulkhead:      bulkhead.NewBuilder[R](uint(maxConcurrent)).WithMaxWaitTime(maxWait).Build(),
		maxConcurrent: maxConcurrent,
		maxWait:       maxWait,
	}
}

// MaxConcurrent is the number of calls that may run at once.
func (b *Bulkhead[R]) MaxConcurrent() int { return b.maxConcurrent }

// MaxWait is how long a call waits for a slot before it is rejected.
func (b *Bulkhead[R]) MaxWait() time.Duration { return b.maxWait }

// Acquire takes a slot, waiting up to MaxWait. A call that finds no slot
// gets a *[RejectedError]; one whose ctx ends while waiting gets ctx's cause.
// A nil error must be followed by ReleasePermit.
func (b *Bulkhead[R]) Acquire(ctx context.Context) error {
	err := b.AcquirePermitWithMaxWait(ctx, b.maxWait)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bulkhead.ErrFull):
		return &RejectedError{Policy: "bulkhead", Err: bulkhead.ErrFull}
	case ctx.Err() != nil:
		return context.Cause(ctx)
	}
	return err
}
