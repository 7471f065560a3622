package engine

import (
	"context"
	"time"

	"github.com/retrace-go/retrace/clock"
)

// Bulkhead bounds the calls that run at once. A call that finds every slot
// taken waits up to MaxWait of its clock's time for one. It is safe for
// concurrent use.
type Bulkhead struct {
	slots   chan struct{}
	MaxWait time.Duration
}

// NewBulkhead returns a bulkhead of n slots (at least 1).
func NewBulkhead(n int, maxWait time.Duration) *Bulkhead {
	return &Bulkhead{slots: make(chan struct{}, max(n, 1)), MaxWait: maxWait}
}

// Size is the number of slots.
func (b *Bulkhead) Size() int { return cap(b.slots) }

// TryAcquire takes a slot if one is free.
func (b *Bulkhead) TryAcquire() bool {
	select {
	case b.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// Acquire takes a slot, waiting up to MaxWait on clk (nil: the wall clock).
// It returns false and nil when no slot freed in time, false and the
// context's cause when ctx ended first. A true must be followed by Release.
func (b *Bulkhead) Acquire(ctx context.Context, clk clock.Clock) (bool, error) {
	if b.TryAcquire() {
		return true, nil
	}
	if b.MaxWait <= 0 {
		return false, nil
	}
	timeout := make(chan struct{})
	t := Or(clk).AfterFunc(b.MaxWait, func() { close(timeout) })
	defer t.Stop()
	select {
	case b.slots <- struct{}{}:
		return true, nil
	case <-timeout:
		return false, nil
	case <-ctx.Done():
		return false, context.Cause(ctx)
	}
}

// Release frees a slot.
func (b *Bulkhead) Release() { <-b.slots }
