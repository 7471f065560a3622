package engine

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/retrace-go/retrace/policies/state"
)

// Deferred is a step on a shared State that need not be made alone: it
// travels in the next batch made on its State (a state.Stepper), in front
// of the step that needs an answer, so that a call pays one round trip
// where each step would pay its own.
type Deferred struct {
	State state.State
	Step  state.Step
	// Call marks the record of a call (a rate budget's): a call the
	// breaker refuses before it reaches anything was never made, and its
	// record is dropped, not sent.
	Call bool
	// Done is told the step's result (Skipped if a gate before it stopped
	// the batch, or it was dropped), or the error of the batch that carried
	// it: its owner then decides locally, as when a step of its own fails.
	Done func(r state.StepResult, err error)
}

// Held reports whether d is a step of no kind: a call's record that its
// owner holds back, to send with a later step of its own. It travels with
// the call like any other (a breaker that refuses the call drops it) and
// its Done is told when a batch would have carried it.
func (d Deferred) Held() bool {
	return d.Step.Breaker == nil && d.Step.Draw == nil && d.Step.Ratio == nil
}

// Pending holds the deferred steps of one call through a retry loop: the
// record of the call, the failure of its last attempt. The loop's next
// step on the same State (the breaker's acquire, the budgets' draw) takes
// them; what is left when the call ends is sent then. [Do] takes one per
// call from an Attempter that is a [PendingUser], else makes one; a nil
// *Pending (a breaker outside a retry loop) defers nothing.
type Pending struct {
	mu    sync.Mutex
	steps []Deferred
	// n is len(steps), written with it under mu: a call on a local
	// breaker and budgets defers nothing, and the loop's look at its
	// Pending at every retry then takes no lock.
	n atomic.Int32
}

// set replaces the steps; the caller holds mu.
func (p *Pending) set(steps []Deferred) {
	p.steps = steps
	p.n.Store(int32(len(steps)))
}

// empty reports whether nothing is pending (a nil Pending defers nothing).
func (p *Pending) empty() bool { return p == nil || p.n.Load() == 0 }

// PendingUser is an Attempter whose attempts take the call's pending
// steps. Do asks it for the call's Pending before the first attempt: an
// Attempter made per call holds one in its own struct, so a call through a
// retry loop allocates none for it.
type PendingUser interface {
	// Pending returns an empty Pending that lives as long as the call.
	Pending() *Pending
}

// Add defers d. It reports false, deferring nothing, on a nil Pending.
func (p *Pending) Add(d Deferred) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	p.set(append(p.steps, d))
	p.mu.Unlock()
	return true
}

// take removes the steps on st and returns them, in the order they came.
func (p *Pending) take(st state.State) []Deferred {
	return p.remove(func(d Deferred) bool { return d.State == st })
}

// remove removes the steps out says yes to and returns them, in the
// order they came.
func (p *Pending) remove(out func(Deferred) bool) []Deferred {
	if p.empty() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var taken, keep []Deferred
	for _, d := range p.steps {
		if out(d) {
			taken = append(taken, d)
		} else {
			keep = append(keep, d)
		}
	}
	p.set(keep)
	return taken
}

// settleHeld tells the held steps (see [Deferred.Held]) that they went,
// and removes them: their owners count them now, so that a step of theirs
// made next carries them.
func (p *Pending) settleHeld() {
	for _, d := range p.remove(Deferred.Held) {
		d.Done(state.StepResult{}, nil)
	}
}

// drop tells the call records on st that the call was never made.
func (p *Pending) drop(st state.State) {
	for _, d := range p.remove(func(d Deferred) bool { return d.State == st && d.Call }) {
		d.Done(state.StepResult{Skipped: true}, nil)
	}
}

// flush sends every step still pending, a batch per State.
func (p *Pending) flush(ctx context.Context) {
	if p.empty() {
		return
	}
	for {
		p.mu.Lock()
		if len(p.steps) == 0 {
			p.mu.Unlock()
			return
		}
		st := p.steps[0].State
		p.mu.Unlock()
		run(ctx, st, p.take(st))
	}
}

// run makes ds on st: in one batch if st is a state.Stepper, else one by
// one. Each step's Done is told how it went; a step of no kind (a record
// its owner holds back, see [Deferred.Held]) is not sent, and told it went.
func run(ctx context.Context, st state.State, ds []Deferred) {
	sent := ds[:0:0]
	for _, d := range ds {
		if d.Held() {
			d.Done(state.StepResult{}, nil)
		} else {
			sent = append(sent, d)
		}
	}
	ds = sent
	if len(ds) == 0 {
		return
	}
	if sp, ok := st.(state.Stepper); ok {
		steps := make([]state.Step, len(ds))
		for i, d := range ds {
			steps[i] = d.Step
		}
		res, err := sp.Steps(ctx, steps)
		for i, d := range ds {
			if err != nil {
				d.Done(state.StepResult{}, err)
			} else {
				d.Done(res[i], nil)
			}
		}
		return
	}
	stopped := false
	for _, d := range ds {
		if stopped {
			d.Done(state.StepResult{Skipped: true}, nil)
			continue
		}
		var r state.StepResult
		var err error
		switch s := d.Step; {
		case s.Breaker != nil:
			r.Breaker, err = st.Breaker(ctx, s.Key, *s.Breaker)
		case s.Draw != nil:
			r.Draw, err = st.Draw(ctx, s.Key, s.Draw.Limit, s.Draw.TTL)
		case s.Ratio != nil:
			r.Ratio, err = st.Ratio(ctx, s.Key, *s.Ratio)
		}
		d.Done(r, err)
		stopped = err == nil && d.Step.Gate && d.Step.Refused(r)
	}
}

// Batchable is a budget whose step may travel in a batch with the
// breaker's: a task budget's draw, a rate budget's record of a call or
// its retry.
type Batchable interface {
	// Deferred returns the step (a record of the call if call, else a
	// retry asked for) and a function that reports its decision once the
	// step's Done was told, and whether the budget has a shared State to
	// defer the step to.
	Deferred(ctx context.Context, call bool) (d Deferred, decided func() (bool, state.Use), ok bool)
}
