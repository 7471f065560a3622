package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Fake is a clock that moves only when told to. Sleepers block until
// [Fake.Advance] moves the time past their wake-up, or their context ends;
// [Fake.BlockUntilSleepers] lets a test await them instead of sleeping.
// AfterFunc callbacks run synchronously inside Advance, in time order.
//
// A Fake made by [NewVirtual] advances by itself: every Sleep moves the time
// forward by its duration and returns at once, so a sequential test of a
// 2 s, 4 s, 8 s backoff runs in microseconds and can then read what was slept.
type Fake struct {
	mu      sync.Mutex
	cond    *sync.Cond
	now     time.Time
	auto    bool
	waiters []*waiter
	slept   []time.Duration
}

type waiter struct {
	at    time.Time
	f     func()        // AfterFunc callback, or nil for a sleeper
	done  chan struct{} // closed when a sleeper wakes
	fired bool
}

// NewFake returns a manual clock that starts at start.
func NewFake(start time.Time) *Fake {
	c := &Fake{now: start}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// NewVirtual returns a clock that starts at start and whose sleeps complete at
// once, each moving the time forward by its duration.
func NewVirtual(start time.Time) *Fake {
	c := NewFake(start)
	c.auto = true
	return c
}

// Now returns the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Until returns deadline minus the fake time.
func (c *Fake) Until(deadline time.Time) time.Duration {
	return deadline.Sub(c.Now())
}

// Sleep blocks until the fake time reaches now+d or ctx is done. On a virtual
// clock it advances the time by d and returns at once.
func (c *Fake) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	c.mu.Lock()
	c.slept = append(c.slept, d)
	if c.auto || d <= 0 {
		c.mu.Unlock()
		if d > 0 {
			c.Advance(d)
		}
		return nil
	}
	w := &waiter{at: c.now.Add(d), done: make(chan struct{})}
	c.waiters = append(c.waiters, w)
	c.cond.Broadcast()
	c.mu.Unlock()

	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		c.remove(w)
		return context.Cause(ctx)
	}
}

// AfterFunc schedules f to run inside the Advance call that reaches now+d.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	w := &waiter{at: c.now.Add(d), f: f}
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	if d <= 0 {
		c.Advance(0)
	}
	return fakeTimer{c: c, w: w}
}

type fakeTimer struct {
	c *Fake
	w *waiter
}

func (t fakeTimer) Stop() bool { return t.c.remove(t.w) }

func (c *Fake) remove(w *waiter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.waiters {
		if x == w {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			c.cond.Broadcast()
			return !w.fired
		}
	}
	return false
}

// Advance moves the time forward by d, waking every sleeper and running every
// callback that falls due, in time order.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	for {
		sort.SliceStable(c.waiters, func(i, j int) bool { return c.waiters[i].at.Before(c.waiters[j].at) })
		if len(c.waiters) == 0 || c.waiters[0].at.After(target) {
			break
		}
		w := c.waiters[0]
		c.waiters = c.waiters[1:]
		if w.at.After(c.now) {
			c.now = w.at
		}
		w.fired = true
		c.cond.Broadcast()
		if w.f == nil {
			close(w.done)
			continue
		}
		c.mu.Unlock()
		w.f()
		c.mu.Lock()
	}
	if target.After(c.now) {
		c.now = target
	}
	c.mu.Unlock()
}

// Sleepers returns how many goroutines are blocked in Sleep.
func (c *Fake) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sleepers()
}

func (c *Fake) sleepers() int {
	n := 0
	for _, w := range c.waiters {
		if w.f == nil {
			n++
		}
	}
	return n
}

// BlockUntilSleepers waits until at least n goroutines are blocked in Sleep.
func (c *Fake) BlockUntilSleepers(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.sleepers() < n {
		c.cond.Wait()
	}
}

// Slept returns the duration of every Sleep call so far, in call order.
func (c *Fake) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}
