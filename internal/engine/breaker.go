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
	// LeaseCalls > 0: a grant of the shared State while closed lets the
	// breaker grant itself that many more calls, for at most LeaseFor on
	// its clock, until a failure, a degraded step or a transition heard
	// (state.Watcher) ends the lease.
	LeaseCalls int
	LeaseFor   time.Duration
}

// Breaker is a circuit breaker: its rule is [state.BreakerEntry.Apply],
// the one every store of a shared breaker applies too, made here on a
// record of its own under a lock, or on the shared State's. It counts what
// it is told (see [state.Count]); which errors count is the caller's
// decision. It is safe for concurrent use.
type Breaker struct {
	lim BreakerLimits
	// lim is read by every step and never written; mu and rec are written
	// by every step. The pad keeps them on separate cache lines: without it
	// lim's last fields share one with mu, and every goroutine's lock takes
	// from the others the line each step then reads its settings from.
	_ [64]byte

	mu sync.Mutex
	// rec is the local record: the breaker's state without a shared State,
	// and while the shared one fails.
	rec state.BreakerEntry

	// With a shared State: the record as the last step on it left it, and
	// whether that step failed (the local state then decides).
	view     state.BreakerView
	viewed   bool // a step on the shared State has answered
	degraded bool
	// pending are steps of this worker's not yet sent (a leased call's
	// records, the successes of a generation left behind): they travel in
	// front of its next step on the shared State (a state.Stepper).
	pending []Deferred
	// held counts the successes of closed calls of generation heldGen not
	// yet sent (the last at heldAt), one record step of heldN ends: no call
	// waits for its success to be recorded, and an admit carries them only
	// once holdEnds are held or holdFor has passed since the first
	// (heldSince), so that most admits are the acquire alone. A step that is
	// not an admit (a failure's, a probe's) carries them first, so that the
	// store sees this worker's ends in the order they came.
	heldN             int
	heldGen           uint64
	heldSince, heldAt time.Time
	// lease: the calls this worker may still grant itself while the
	// shared record stays closed in generation leaseGen, until leaseUntil.
	leaseLeft  int
	leaseGen   uint64
	leaseUntil time.Time

	// now mirrors the state State reports (the shared view's, or the local
	// record's), written under mu after every step that may change it:
	// read at every retry (a breaker inside the loop refuses the next
	// attempt while it is open), it is read without taking the lock the
	// steps of every other call hold.
	now atomic.Int32
	// closedGen is 1 + the local record's generation while it is closed,
	// 0 while it is not, written with now. A closed record grants an
	// acquire without a change (the rule's own answer), so the local
	// acquire of a closed breaker, every call's, reads it and takes no
	// lock: the grant is ordered before any step that holds the lock.
	closedGen atomic.Uint64

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
func NewBreaker(lim BreakerLimits) *Breaker {
	b := &Breaker{lim: lim}
	b.closedGen.Store(1) // a new record is closed, in generation 0
	return b
}

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
	return b.AcquireWith(nil, clk)
}

// AcquireWith is Acquire for an attempt of a call whose steps on the shared
// State may be pending in pend (see [Pending]): with a state.Stepper,
// they and the successes this worker has not sent yet go in one batch with
// the acquire, one round trip.
//
// A breaker that the shared State last showed open refuses the call itself
// until the cool-down it saw ends, the same test the store makes: it sends
// nothing, and the call's record for a rate budget is dropped, as the call
// never reached anything.
func (b *Breaker) AcquireWith(pend *Pending, clk clock.Clock) (Permit, bool) {
	if b.lim.State == nil {
		return b.acquireLocal(clk)
	}
	now := b.clock(clk).Now()
	b.mu.Lock()
	cooling := b.viewed && !b.degraded && state.Cooling(b.view, now, b.lim.Delay)
	gen := b.view.Gen
	b.mu.Unlock()
	if w, ok := b.lim.State.(state.Watcher); ok && cooling && w.Moved(b.lim.Key) > gen {
		cooling = false // another worker moved it since: ask
	}
	if cooling {
		pend.drop(b.lim.State)
		return Permit{gen: gen, use: state.Use{Policy: state.PolicyBreaker, Shared: true}}, false
	}
	if p, ok := b.leased(now, pend); ok {
		return p, true
	}
	if _, ok := b.lim.State.(state.Stepper); ok {
		op := state.BreakerOp{Kind: state.BreakerAcquire}
		b.settings(&op)
		op.Now = now
		v, err := b.batch(pend.take(b.lim.State), &op, b.carryHeld(now))
		if err != nil {
			p, ok := b.acquireLocal(clk)
			p.use = state.Use{Policy: state.PolicyBreaker, Degraded: err}
			return p, ok
		}
		if v.Granted && !v.Probe && v.State == circuitbreaker.ClosedState && b.lim.LeaseCalls > 0 {
			b.mu.Lock()
			b.leaseLeft, b.leaseGen, b.leaseUntil = b.lim.LeaseCalls, v.Gen, now.Add(b.lim.LeaseFor)
			b.mu.Unlock()
		}
		return Permit{gen: v.Gen, probe: v.Probe, use: state.Use{Policy: state.PolicyBreaker, Shared: true}}, v.Granted
	}
	pend.flush(stateCtx())
	v, err := b.shared(state.BreakerOp{Kind: state.BreakerAcquire}, clk)
	if err != nil {
		p, ok := b.acquireLocal(clk)
		p.use = state.Use{Policy: state.PolicyBreaker, Degraded: err}
		return p, ok
	}
	return Permit{gen: v.Gen, probe: v.Probe, use: state.Use{Policy: state.PolicyBreaker, Shared: true}}, v.Granted
}

// settings fills op with the breaker's settings.
func (b *Breaker) settings(op *state.BreakerOp) {
	op.FailureThreshold, op.Delay, op.HalfOpenProbes, op.SuccessThreshold = b.lim.FailureThreshold, b.lim.Delay, b.lim.HalfOpenProbes, b.lim.SuccessThreshold
	op.ProbeLease = b.lim.ProbeLease
	op.FailureRate, op.MinimumCalls, op.Window = b.lim.FailureRate, b.lim.MinimumCalls, b.lim.Window
	op.TTL = b.lim.TTL
}

// local makes one step on the local record. The local record never
// expires (TTL 0): a TTL is for a shared one, which a lost fleet must not
// hold. The step reads the clock only if it needs the time: a call through
// a closed breaker pays for no clock.
func (b *Breaker) local(op state.BreakerOp, clk clock.Clock) state.BreakerView {
	b.settings(&op)
	op.TTL = 0
	b.mu.Lock()
	if b.rec.NeedsTime(op) {
		op.Now = b.clock(clk).Now()
	}
	v := b.rec.Apply(op)
	b.publish()
	b.mu.Unlock()
	if v.Changed {
		b.notify(v.From, v.State)
	}
	return v
}

// leased grants a call on the breaker's lease, if it holds one that still
// holds at now: the call's pending steps on the State (its record for a
// rate budget) wait with the breaker's own for its next ask.
func (b *Breaker) leased(now time.Time, pend *Pending) (Permit, bool) {
	if b.lim.LeaseCalls <= 0 {
		return Permit{}, false
	}
	moved := uint64(0)
	if w, ok := b.lim.State.(state.Watcher); ok {
		moved = w.Moved(b.lim.Key)
	}
	b.mu.Lock()
	ok := b.leaseLeft > 0 && !b.degraded && b.view.Gen == b.leaseGen && now.Before(b.leaseUntil) && moved <= b.leaseGen
	if !ok {
		b.leaseLeft = 0
		b.mu.Unlock()
		return Permit{}, false
	}
	b.leaseLeft--
	gen := b.leaseGen
	b.mu.Unlock()
	if ds := pend.take(b.lim.State); len(ds) > 0 {
		b.mu.Lock()
		b.pending = append(b.pending, ds...)
		b.mu.Unlock()
	}
	return Permit{gen: gen, use: state.Use{Policy: state.PolicyBreaker, Shared: true}}, true
}

// shared makes one step on the shared State and keeps what it returns; a
// failed step marks the breaker degraded until one succeeds. With a
// state.Stepper the successes not yet sent go in front of it.
func (b *Breaker) shared(op state.BreakerOp, clk clock.Clock) (state.BreakerView, error) {
	b.settings(&op)
	op.Now = b.clock(clk).Now()
	if _, ok := b.lim.State.(state.Stepper); ok {
		return b.batch(nil, &op, true)
	}
	v, err := b.lim.State.Breaker(stateCtx(), b.lim.Key, op)
	b.answered(v, err)
	return v, err
}

// holdEnds is how many successes a breaker holds back at most before an
// admit carries them; holdFor (a tenth of the cool-down, at most a second)
// how long: the fleet's record then lags this worker's by no more.
const holdEnds = 16

func (b *Breaker) holdFor() time.Duration { return min(b.lim.Delay/10, time.Second) }

// carryHeld reports whether an admit at now carries the successes held
// back: once holdEnds are held or holdFor has passed, always with a failure
// rate (whose window must see the successes beside the failures, not in a
// burst after them), and with a lease (its ask carries the leased calls'
// records).
func (b *Breaker) carryHeld(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.heldN > 0 && (b.heldN >= holdEnds || now.Sub(b.heldSince) >= b.holdFor() || b.lim.FailureRate > 0 || b.lim.LeaseCalls > 0)
}

// takeOwn removes and returns this worker's steps not yet sent: the
// pending ones, then, if held, the successes held back as one step. b.mu
// is held.
func (b *Breaker) takeOwn(held bool) []Deferred {
	own := b.pending
	b.pending = nil
	if held && b.heldN > 0 {
		op := state.BreakerOp{Kind: state.BreakerRecord, Gen: b.heldGen, Count: state.Success, N: b.heldN}
		b.settings(&op)
		op.Now = b.heldAt
		own = append(own, b.deferRecord(op, false))
		b.heldN = 0
	}
	return own
}

// batch makes, in one batch on the shared State (a state.Stepper), this
// worker's steps not yet sent (the successes held back too if held), the
// steps before (a call's pending ones), and op (if not nil), and returns
// op's answer. A success whose batch failed is recorded locally, as a
// failed Record's is.
func (b *Breaker) batch(before []Deferred, op *state.BreakerOp, held bool) (state.BreakerView, error) {
	b.mu.Lock()
	own := b.takeOwn(held)
	b.mu.Unlock()
	ds := make([]Deferred, 0, len(own)+len(before)+1)
	ds = append(ds, own...)
	ds = append(ds, before...)
	var v state.BreakerView
	var verr error
	if op != nil {
		ds = append(ds, Deferred{State: b.lim.State, Step: state.Step{Key: b.lim.Key, Breaker: op}, Done: func(r state.StepResult, err error) {
			v, verr = r.Breaker, err
			b.answered(v, err)
		}})
	}
	run(stateCtx(), b.lim.State, ds)
	return v, verr
}

// deferRecord is the end of a call (op, a record) as a step that may wait
// for a batch; gate: a record that leaves the breaker open stops the batch.
func (b *Breaker) deferRecord(op state.BreakerOp, gate bool) Deferred {
	return Deferred{State: b.lim.State, Step: state.Step{Key: b.lim.Key, Breaker: &op, Gate: gate}, Done: func(r state.StepResult, err error) {
		if r.Skipped {
			return // a record is never behind a gate
		}
		b.answered(r.Breaker, err)
		if err != nil {
			b.local(state.BreakerOp{Kind: state.BreakerRecordCurrent, Count: op.Count, N: op.N}, nil)
		}
	}}
}

// answered keeps what a step on the shared State returned, or that it
// failed.
func (b *Breaker) answered(v state.BreakerView, err error) {
	b.mu.Lock()
	b.degraded = err != nil
	if err == nil {
		b.view, b.viewed = v, true
	}
	b.publish()
	b.mu.Unlock()
	if err == nil && v.Changed {
		b.notify(v.From, v.State)
	}
}

func (b *Breaker) acquireLocal(clk clock.Clock) (Permit, bool) {
	if g := b.closedGen.Load(); g != 0 {
		return Permit{gen: g - 1}, true
	}
	v := b.local(state.BreakerOp{Kind: state.BreakerAcquire}, clk)
	return Permit{gen: v.Gen, probe: v.Probe}, v.Granted
}

// Record records the end of a permitted call. A call the shared State let
// through is recorded there; when that fails, it is recorded locally and
// Record returns the state's error.
func (b *Breaker) Record(p Permit, c state.Count, clk clock.Clock) error {
	if !p.use.Shared {
		b.local(state.BreakerOp{Kind: state.BreakerRecord, Gen: p.gen, Probe: p.probe, Count: c}, clk)
		return nil
	}
	if _, err := b.shared(state.BreakerOp{Kind: state.BreakerRecord, Gen: p.gen, Probe: p.probe, Count: c}, clk); err != nil {
		b.local(state.BreakerOp{Kind: state.BreakerRecordCurrent, Count: c}, clk)
		return err
	}
	return nil
}

// maxPending bounds the steps a breaker holds back, its successes
// included: past it, they are sent at once (an admit carries them long
// before, unless the calls stop acquiring).
const maxPending = 64

// RecordWith is Record for an attempt of a call whose steps on the shared
// State may be pending in pend. With a state.Stepper: a success while
// closed is held back, sent in front of this worker's next step on the
// State; a failure is left pending in pend (a retry loop's, see
// [Pending]) for the loop's next step, the retry's draw or the
// next acquire, which sends it first and stops if it opened the breaker;
// an ignored end of a closed permit changes nothing and is not sent. A
// probe's end decides the half-open breaker, and is sent at once.
func (b *Breaker) RecordWith(pend *Pending, p Permit, c state.Count, clk clock.Clock) error {
	if _, ok := b.lim.State.(state.Stepper); !ok || !p.use.Shared || p.probe {
		return b.Record(p, c, clk)
	}
	op := state.BreakerOp{Kind: state.BreakerRecord, Gen: p.gen, Count: c}
	b.settings(&op)
	switch c {
	case state.Ignore:
		return nil // neither a failure nor a success, and no probe slot to free
	case state.Success:
		now := b.clock(clk).Now()
		b.mu.Lock()
		if b.heldN > 0 && b.heldGen != p.gen {
			// Another generation's: those held go as they are, first.
			b.pending = append(b.pending, b.takeOwn(true)...)
		}
		if b.heldN == 0 {
			b.heldGen, b.heldSince = p.gen, now
		}
		b.heldN++
		b.heldAt = now
		full := b.heldN+len(b.pending) >= maxPending
		b.mu.Unlock()
		if !full {
			return nil
		}
		_, err := b.batch(nil, nil, true)
		return err
	}
	// A failure ends the lease: the next call asks.
	b.mu.Lock()
	b.leaseLeft = 0
	var own []Deferred
	if pend != nil {
		// This worker's ends before the failure go in front of it.
		own = b.takeOwn(true)
	}
	b.mu.Unlock()
	if pend == nil {
		return b.Record(p, c, clk)
	}
	op.Now = b.clock(clk).Now()
	for _, d := range own {
		pend.Add(d)
	}
	pend.Add(b.deferRecord(op, true))
	return nil
}

// notify calls the watchers and OnStateChange after a transition, outside
// the lock. A panic in OnStateChange is the user's callback failing, not
// the call's: it is recovered so that the permit the caller holds is still
// recorded and the breaker cannot stick half open.
func (b *Breaker) notify(from, to circuitbreaker.State) {
	if ws := b.watchers.Load(); ws != nil {
		for _, w := range *ws {
			w.f(from, to)
		}
	}
	if b.lim.OnStateChange == nil {
		return
	}
	defer func() { _ = recover() }()
	b.lim.OnStateChange(from, to)
}

// Set moves the breaker to state now: the shared one too, with a State.
func (b *Breaker) Set(to circuitbreaker.State, clk clock.Clock) {
	if b.lim.State != nil {
		if _, err := b.shared(state.BreakerOp{Kind: state.BreakerSet, To: to}, clk); err == nil {
			return
		}
	}
	b.local(state.BreakerOp{Kind: state.BreakerSet, To: to}, clk)
}

// State returns the current state. An open breaker whose cool-down has
// ended reports OpenState until the next call asks for a permit.
//
// With a shared State it is the state as the last step on it left it, or
// the local state while the shared one fails.
func (b *Breaker) State() circuitbreaker.State {
	return circuitbreaker.State(b.now.Load())
}

// publish stores the state State reports; the caller holds mu.
func (b *Breaker) publish() {
	var g uint64
	if b.rec.State == circuitbreaker.ClosedState {
		g = b.rec.Gen + 1
	}
	st := b.rec.State
	if b.sharedView() {
		st = b.view.State
	}
	// Written only when they change: most steps change neither (a failure
	// below the threshold), and a store takes the line the other cores'
	// acquires read from them.
	if b.closedGen.Load() != g {
		b.closedGen.Store(g)
	}
	if b.now.Load() != int32(st) {
		b.now.Store(int32(st))
	}
}

// sharedView reports whether the shared record decides now; the caller
// holds mu.
func (b *Breaker) sharedView() bool { return b.lim.State != nil && !b.degraded }

// Remaining returns the time left before an open breaker lets a probe
// through, 0 if it is not open.
func (b *Breaker) Remaining(clk clock.Clock) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	state, openedAt := b.rec.State, b.rec.OpenedAt
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
	return b.rec.Executions, b.rec.Failures, b.rec.Successes
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
	b.local(state.BreakerOp{Kind: state.BreakerRecordCurrent, Count: c}, clk)
}
