package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/policies/state"
)

// BreakerLimits are a circuit breaker's settings, with defaults filled in.
type BreakerLimits struct {
	Name             string
	FailureThreshold int // consecutive failures that open it, without FailureRate
	// FailureRate, if above 0, opens it instead when at least this share of
	// the calls in the last Window failed, once the window holds
	// MinimumCalls: see [state.RateBucket] for how the window is cut.
	FailureRate      float64
	MinimumCalls     int
	Window           time.Duration
	Delay            time.Duration // the cool-down before a half-open probe
	HalfOpenProbes   int           // calls let through at once while half open
	ProbeLease       time.Duration // how long a probe holds its slot before another may take it; 0 → for good
	SuccessThreshold int           // successful probes that close it
	Clock            clock.Clock   // the breaker's own clock; nil → the caller's
	// OnStateChange is called after each transition, outside the lock.
	OnStateChange func(from, to circuitbreaker.State)
	// State, if set, holds the breaker's state for every breaker of the same
	// Key: they open, probe and close together. When it fails, the breaker
	// decides on its own local state until it answers again.
	State state.State
	Key   string        // the record's key in State
	TTL   time.Duration // the record expires this long after its last step
}

// Breaker is a circuit breaker's state machine. It counts what it is told
// (see [state.Count]); which errors count is the caller's decision. It is safe for
// concurrent use.
type Breaker struct {
	lim BreakerLimits

	mu          sync.Mutex
	state       circuitbreaker.State
	gen         uint64           // transitions so far: a permit is stale once it moves on
	consecutive int              // consecutive failures while closed
	window      state.RateWindow // calls and failures while closed, with FailureRate
	openedAt    time.Time        // when it last opened
	probes      int              // probes in flight while half open
	probeOK     int              // successful probes while half open
	leaseUntil  time.Time        // when the last probe granted loses its slot (ProbeLease)
	executions  uint             // counts since the last transition
	failures    uint
	successes   uint

	// With a shared State: the record as the last step on it left it, and
	// whether that step failed (the local state then decides).
	view     state.BreakerView
	degraded bool

	watchMu  sync.Mutex
	watchers atomic.Pointer[[]watcher] // copied on write: notify reads them without a lock
}

type watcher struct {
	key any
	f   func(from, to circuitbreaker.State)
}

// Watch calls f after each transition, outside the lock, as OnStateChange
// is called, once per key: layers that share a breaker and record to the
// same place register it once, so that each transition is told there once.
// It reports whether f was added. key must be comparable; f must not panic.
func (b *Breaker) Watch(key any, f func(from, to circuitbreaker.State)) bool {
	b.watchMu.Lock()
	defer b.watchMu.Unlock()
	var ws []watcher
	if cur := b.watchers.Load(); cur != nil {
		for _, w := range *cur {
			if w.key == key {
				return false
			}
		}
		ws = append(ws, *cur...)
	}
	ws = append(ws, watcher{key, f})
	b.watchers.Store(&ws)
	return true
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
	use   state.Use
}

// Probe reports whether the call is a half-open probe.
func (p Permit) Probe() bool { return p.probe }

// State says whether the shared state or the local one granted or refused
// the call; the zero state.Use for a breaker without a shared State.
func (p Permit) State() state.Use { return p.use }

func (b *Breaker) clock(clk clock.Clock) clock.Clock { return Or(b.lim.Clock, clk) }

// Acquire asks to make a call, on the breaker's clock, else clk. It returns
// the permit and true, or false when the breaker refuses the call (open, or
// half open with every probe slot taken). With a shared State it asks the
// state, and its local state when the shared one fails.
func (b *Breaker) Acquire(clk clock.Clock) (Permit, bool) {
	if b.lim.State == nil {
		return b.acquireLocal(clk)
	}
	v, err := b.shared(state.BreakerOp{Kind: state.BreakerAcquire}, clk)
	if err != nil {
		p, ok := b.acquireLocal(clk)
		p.use = state.Use{Policy: state.PolicyBreaker, Degraded: err}
		return p, ok
	}
	return Permit{gen: v.Gen, probe: v.Probe, use: state.Use{Policy: state.PolicyBreaker, Shared: true}}, v.Granted
}

// shared makes one step on the shared State and keeps what it returns; a
// failed step marks the breaker degraded until one succeeds.
func (b *Breaker) shared(op state.BreakerOp, clk clock.Clock) (state.BreakerView, error) {
	op.Now = b.clock(clk).Now()
	op.FailureThreshold, op.Delay, op.HalfOpenProbes, op.SuccessThreshold = b.lim.FailureThreshold, b.lim.Delay, b.lim.HalfOpenProbes, b.lim.SuccessThreshold
	op.ProbeLease = b.lim.ProbeLease
	op.FailureRate, op.MinimumCalls, op.Window = b.lim.FailureRate, b.lim.MinimumCalls, b.lim.Window
	op.TTL = b.lim.TTL
	v, err := b.lim.State.Breaker(stateCtx(), b.lim.Key, op)
	b.mu.Lock()
	b.degraded = err != nil
	if err == nil {
		b.view = v
	}
	b.mu.Unlock()
	if err == nil && v.Changed {
		b.notify([]stateChange{{v.From, v.State}})
	}
	return v, err
}

func (b *Breaker) acquireLocal(clk clock.Clock) (Permit, bool) {
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
		now := b.clock(clk).Now()
		if b.probes >= b.lim.HalfOpenProbes && b.lim.ProbeLease > 0 && !now.Before(b.leaseUntil) {
			// The probes out have held their slots past their lease: they
			// are lost. A new half-open generation ignores their ends.
			b.gen++
			b.probes, b.probeOK = 0, 0
			p.gen = b.gen
		}
		if b.probes >= b.lim.HalfOpenProbes {
			ok = false
		} else {
			b.probes++
			b.leaseUntil = now.Add(b.lim.ProbeLease)
			p.probe = true
		}
	}
	b.mu.Unlock()
	b.notify(change)
	return p, ok
}

// Record records the end of a permitted call. A call the shared State let
// through is recorded there; when that fails, it is recorded locally and
// Record returns the state's error.
func (b *Breaker) Record(p Permit, c state.Count, clk clock.Clock) error {
	if !p.use.Shared {
		b.recordLocal(p, c, clk)
		return nil
	}
	if _, err := b.shared(state.BreakerOp{Kind: state.BreakerRecord, Gen: p.gen, Probe: p.probe, Count: c}, clk); err != nil {
		b.recordCurrentLocal(c, clk)
		return err
	}
	return nil
}

func (b *Breaker) recordLocal(p Permit, c state.Count, clk clock.Clock) {
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
	case state.Ignore:
	case state.Fail:
		b.executions++
		b.failures++
		switch b.state {
		case circuitbreaker.ClosedState:
			if b.closedFailure(clk) {
				change = b.transition(circuitbreaker.OpenState, clk, change)
			}
		case circuitbreaker.HalfOpenState:
			change = b.transition(circuitbreaker.OpenState, clk, change)
		}
	case state.Success:
		b.executions++
		b.successes++
		switch b.state {
		case circuitbreaker.ClosedState:
			b.consecutive = 0
			if b.lim.FailureRate > 0 {
				b.window.Add(state.RateBucket(b.clock(clk).Now(), b.lim.Window), false)
			}
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

// closedFailure counts a Transient failure while closed and reports whether
// it opens the breaker: on the failure rate over the window with
// FailureRate, else on the consecutive count. The caller holds mu.
func (b *Breaker) closedFailure(clk clock.Clock) bool {
	if b.lim.FailureRate > 0 {
		idx := state.RateBucket(b.clock(clk).Now(), b.lim.Window)
		b.window.Add(idx, true)
		calls, failures := b.window.Sum(idx)
		return state.RateOpens(calls, failures, b.lim.FailureRate, b.lim.MinimumCalls)
	}
	b.consecutive++
	return b.consecutive >= b.lim.FailureThreshold
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
	b.window = state.RateWindow{}
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
	if len(changes) == 0 {
		return
	}
	if ws := b.watchers.Load(); ws != nil {
		for _, c := range changes {
			for _, w := range *ws {
				w.f(c.from, c.to)
			}
		}
	}
	if b.lim.OnStateChange == nil {
		return
	}
	defer func() { _ = recover() }()
	for _, c := range changes {
		b.lim.OnStateChange(c.from, c.to)
	}
}

// Set moves the breaker to state now: the shared one too, with a State.
func (b *Breaker) Set(to circuitbreaker.State, clk clock.Clock) {
	if b.lim.State != nil {
		if _, err := b.shared(state.BreakerOp{Kind: state.BreakerSet, To: to}, clk); err == nil {
			return
		}
	}
	b.mu.Lock()
	change := b.transition(to, clk, nil)
	b.mu.Unlock()
	b.notify(change)
}

// State returns the current state. An open breaker whose cool-down has
// ended reports OpenState until the next call asks for a permit.
//
// With a shared State it is the state as the last step on it left it, or
// the local state while the shared one fails.
func (b *Breaker) State() circuitbreaker.State {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sharedView() {
		return b.view.State
	}
	return b.state
}

// sharedView reports whether the shared record decides now; the caller
// holds mu.
func (b *Breaker) sharedView() bool { return b.lim.State != nil && !b.degraded }

// Remaining returns the time left before an open breaker lets a probe
// through, 0 if it is not open.
func (b *Breaker) Remaining(clk clock.Clock) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	state, openedAt := b.state, b.openedAt
	if b.sharedView() {
		state, openedAt = b.view.State, b.view.OpenedAt
	}
	if state != circuitbreaker.OpenState {
		return 0
	}
	return max(0, openedAt.Add(b.lim.Delay).Sub(b.clock(clk).Now()))
}

// Counts returns the executions, failures and successes since the last
// transition.
func (b *Breaker) Counts() (executions, failures, successes uint) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sharedView() {
		return b.view.Executions, b.view.Failures, b.view.Successes
	}
	return b.executions, b.failures, b.successes
}

// RecordCurrent records the end of a call that holds no permit (failsafe-go's
// permit API hands out none): it counts toward the state the breaker is in
// now, and frees a probe slot if one is taken. With a shared State it
// records there, and locally when that fails.
func (b *Breaker) RecordCurrent(c state.Count, clk clock.Clock) {
	if b.lim.State != nil {
		if _, err := b.shared(state.BreakerOp{Kind: state.BreakerRecordCurrent, Count: c}, clk); err == nil {
			return
		}
	}
	b.recordCurrentLocal(c, clk)
}

func (b *Breaker) recordCurrentLocal(c state.Count, clk clock.Clock) {
	b.mu.Lock()
	p := Permit{gen: b.gen, probe: b.state == circuitbreaker.HalfOpenState && b.probes > 0}
	b.mu.Unlock()
	b.recordLocal(p, c, clk)
}
