package clock

import (
	"context"
	"time"
)

// Clock tells the time and waits. Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the clock's current time.
	Now() time.Time
	// Sleep waits for d of clock time or until ctx is done, whichever comes
	// first. It returns nil after a full wait and context.Cause(ctx) otherwise;
	// it returns within a millisecond of ctx being canceled.
	Sleep(ctx context.Context, d time.Duration) error
	// AfterFunc calls f in its own goroutine after d of clock time. The
	// returned Timer's Stop prevents the call if it has not happened yet.
	AfterFunc(d time.Duration, f func()) Timer
	// Until returns how much clock time is left before a wall-clock deadline,
	// such as a context's: the clock's own measure of time.Until(deadline).
	Until(deadline time.Time) time.Duration
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call and reports whether it did so.
	Stop() bool
}

// Real returns the wall clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	return sleep(ctx, d)
}

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

func (realClock) Until(deadline time.Time) time.Duration { return time.Until(deadline) }

// sleep waits d of wall time or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Scaled returns a clock on which every duration passes scale times as fast
// as on the wall clock: with scale 0.001 a Sleep of 8 s takes 8 ms, and Now
// advances 1000 s per wall-clock second. Callers keep reasoning in the
// configured durations (spans say 8 s); only the waiting is shortened. A scale
// of 0 or less, or 1, is the wall clock.
func Scaled(scale float64) Clock {
	if scale <= 0 || scale == 1 {
		return realClock{}
	}
	return &scaledClock{scale: scale, origin: time.Now()}
}

type scaledClock struct {
	scale  float64
	origin time.Time
}

func (c *scaledClock) wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) * c.scale)
}

func (c *scaledClock) Now() time.Time {
	elapsed := time.Since(c.origin)
	return c.origin.Add(time.Duration(float64(elapsed) / c.scale))
}

func (c *scaledClock) Sleep(ctx context.Context, d time.Duration) error {
	return sleep(ctx, c.wall(d))
}

func (c *scaledClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(c.wall(d), f)
}

func (c *scaledClock) Until(deadline time.Time) time.Duration {
	return time.Duration(float64(time.Until(deadline)) / c.scale)
}

// WithTimeout returns a copy of ctx that is canceled with cause after d of
// clk's time, and the function that releases it. On the wall clock the
// context also carries the deadline, so that network calls beneath it see it.
func WithTimeout(ctx context.Context, clk Clock, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	if _, ok := clk.(realClock); ok || clk == nil {
		return context.WithTimeoutCause(ctx, d, cause)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := clk.AfterFunc(d, func() { cancel(cause) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}
