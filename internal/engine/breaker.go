package engine

import (
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/retrace-go/retrace/clock"
)

// BreakerLimits are a circuit breaker's settings, with defaults filled in.
type BreakerLimits struct {
	Name             string
	FailureThreshold int           // consecutive failures that open it
	Delay            time.Duration // the cool-down before a half-open probe
	HalfOpenProbes   int           // calls let through at once while half open
	SuccessThreshold int           // successful probes that close it
	Clock            clock.Clock   // the breaker's own clock; nil → the caller's
	// OnStateChange is called after each transition, outside the lock.
	OnStateChange func(from, to circuitbreaker.State)
}

// Breaker is a circuit breaker's state machine. It counts what it is told
// (see [Count]); which errors count is the caller's decision. It is safe for
// concurrent use.
type Breaker struct {
	lim BreakerLimits

	mu          sync.Mutex
	state       circuitbreaker.State
	gen         uint64    // transitions so far: a permit is stale once it moves on
	consecutive int       // consecutive failures while closed
	openedAt    time.Time // when it last opened
	probes      int       // probes in flight while half open
	probeOK     int       // successful probes while half open
	executions  uint      // counts since the last transition
	failures    uint
	successes   uint
}

// NewBreaker returns a closed breaker.
func NewBreaker(lim BreakerLimits) *Breaker { return &Breaker{lim: lim} }

// Limits returns the breaker's settings.
func (b *Breaker) Limits() BreakerLimits { return b.lim }

// Permit is a call the breaker let through: it remembers the state and the
// generation it was granted in, so that its end counts only toward that
// state. A call admitted while closed that ends after the breaker opened
// and half-opened neither frees a probe slot nor closes the breaker.
type Permit struct {
	gen   uint64
	probe bool // it holds a half-open probe slot
}

// Probe reports whether the call is a half-open probe.
func (p Permit) Probe() bool { return p.probe }

func (b *Breaker) clock(clk clock.Clock) clock.Clock { return Or(b.lim.Clock, clk) }

// Acquire asks to make a call, on the breaker's clock, else clk. It returns
// the permit and true, or false when the breaker refuses the call (open, or
// half open with every probe slot taken).
func (b *Breaker) Acquire(clk clock.Clock) (Permit, bool) {
	b.mu.Lock()
	var change []stateChange
	if b.state == circuitbreaker.OpenState && !b.clock(clk).Now().Before(b.openedAt.Add(b.lim.Delay)) {
		change = b.transition(circuitbreaker.HalfOpenState, clk, change)
	}
	p, ok := Permit{gen: b.gen}, true
	switch b.state {
	case circuitbreaker.OpenState:
		ok = false
	case circuitbreaker.HalfOpenState:
		if b.probes >= b.lim.HalfOpenProbes {
			ok = false
		} else {
			b.probes++
			p.probe = true
		}
	}
	b.mu.Unlock()
	b.notify(change)
	return p, ok
}

// Record records the end of a permitted call.
func (b *Breaker) Record(p Permit, c Count, clk clock.Clock) {
	b.mu.Lock()
	if p.gen != b.gen {
		// Granted in a state the breaker has left: what it says about the
		// downstream is older than the transition, so it changes nothing.
		b.mu.Unlock()
		return
	}
	var change []stateChange
	if p.probe {
		b.probes--
	}
	switch c {
	case Ignore:
	case Fail:
		b.executions++
		b.failures++
		switch b.state {
		case circuitbreaker.ClosedState:
			b.consecutive++
			if b.consecutive >= b.lim.FailureThreshold {
				change = b.transition(circuitbreaker.OpenState, clk, change)
			}
		case circuitbreaker.HalfOpenState:
			change = b.transition(circuitbreaker.OpenState, clk, change)
		}
	case Success:
		b.executions++
		b.successes++
		switch b.state {
		case circuitbreaker.ClosedState:
			b.consecutive = 0
		case circuitbreaker.HalfOpenState:
			b.probeOK++
			if b.probeOK >= b.lim.SuccessThreshold {
				change = b.transition(circuitbreaker.ClosedState, clk, change)
			}
		}
	}
	b.mu.Unlock()
	b.notify(change)
}

type stateChange struct{ from, to circuitbreaker.State }

// transition moves to state; the caller holds mu and notifies after unlocking.
func (b *Breaker) transition(to circuitbreaker.State, clk clock.Clock, changes []stateChange) []stateChange {
	from := b.state
	if from == to {
		return changes
	}
	b.state = to
	b.gen++
	b.consecutive, b.probes, b.probeOK = 0, 0, 0
	b.executions, b.failures, b.successes = 0, 0, 0
	if to == circuitbreaker.OpenState {
		b.openedAt = b.clock(clk).Now()
	}
	return append(changes, stateChange{from, to})
}

// notify calls OnStateChange for each change. A panic there is the user's
// callback failing, not the call's: it is recovered so that the permit the
// caller holds is still recorded and the breaker cannot stick half open.
func (b *Breaker) notify(changes []stateChange) {
	if b.lim.OnStateChange == nil || len(changes) == 0 {
		return
	}
	defer func() { _ = recover() }()
	for _, c := range changes {
		b.lim.OnStateChange(c.from, c.to)
	}
}

// Set moves the breaker to state now.
func (b *Breaker) Set(to circuitbreaker.State, clk clock.Clock) {
	b.mu.Lock()
	change := b.transition(to, clk, nil)
	b.mu.Unlock()
	b.notify(change)
}

// State returns the current state. An open breaker whose cool-down has
// ended reports OpenState until the next call asks for a permit.
func (b *Breaker) State() circuitbreaker.State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// Remaining returns the time left before an open breaker lets a probe
// through, 0 if it is not open.
func (b *Breaker) Remaining(clk clock.Clock) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != circuitbreaker.OpenState {
		return 0
	}
	return max(0, b.openedAt.Add(b.lim.Delay).Sub(b.clock(clk).Now()))
}

// Counts returns the executions, failures and successes since the last
// transition.
func (b *Breaker) Counts() (executions, failures, successes uint) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.executions, b.failures, b.successes
}

// RecordCurrent records the end of a call that holds no permit (failsafe-go's
// permit API hands out none): it counts toward the state the breaker is in
// now, and frees a probe slot if one is taken.
func (b *Breaker) RecordCurrent(c Count, clk clock.Clock) {
	b.mu.Lock()
	p := Permit{gen: b.gen, probe: b.state == circuitbreaker.HalfOpenState && b.probes > 0}
	b.mu.Unlock()
	b.Record(p, c, clk)
}
