package state

import (
	"context"
	"fmt"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
)

// Stepper is a State that makes several steps in one go: the breakers and
// budgets of one call send what a call costs them (the call's record for a
// rate budget and the breaker's permit before an attempt; the failure, the
// task budget's draw and the rate budget's retry after one) in one round
// trip, where each step on its own would wait for one. A State that
// implements only State still works: the policies then make each step
// alone.
//
// Steps makes steps in order, each as its State method would, and all of
// them atomically: no step of another worker comes between two of a batch
// (a store whose keys live on several nodes may split a batch where its
// keys change node; each part is then atomic, and a part runs only if the
// one before did not stop the batch). A step with Gate set that refuses
// stops the batch: the steps after it are not made, and their results say
// Skipped. A step refuses when it is a breaker acquire that grants nothing,
// a breaker record that leaves the breaker open and cooling down at its
// Now, a draw that takes nothing, or a retry its ratio does not allow.
type Stepper interface {
	State
	Steps(ctx context.Context, steps []Step) ([]StepResult, error)
}

// Step is one step of a batch: exactly one of Breaker, Draw and Ratio is
// set, on the record under Key.
type Step struct {
	Key     string
	Breaker *BreakerOp
	Draw    *DrawOp
	Ratio   *RatioOp
	Gate    bool // a refusal stops the batch
}

// DrawOp is the step of [State.Draw].
type DrawOp struct {
	Limit int64
	TTL   time.Duration
}

// StepResult is what a step of a batch returned: the field of its kind.
type StepResult struct {
	Skipped bool // a gate before it stopped the batch
	Breaker BreakerView
	Draw    DrawView
	Ratio   RatioView
}

// Valid returns an error if a step of steps does not set exactly one of
// Breaker, Draw and Ratio.
func Valid(steps []Step) error {
	for i, s := range steps {
		n := 0
		for _, set := range []bool{s.Breaker != nil, s.Draw != nil, s.Ratio != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("state: step %d of the batch sets %d of Breaker, Draw and Ratio, not one", i, n)
		}
	}
	return nil
}

// Refused reports whether the step refused, as a gate reads it (see
// [Stepper]).
func (s Step) Refused(r StepResult) bool {
	switch {
	case r.Skipped:
		return true
	case s.Breaker != nil && s.Breaker.Kind == BreakerAcquire:
		return !r.Breaker.Granted
	case s.Breaker != nil:
		return Cooling(r.Breaker, s.Breaker.Now, s.Breaker.Delay)
	case s.Draw != nil:
		return !r.Draw.OK
	case s.Ratio != nil:
		return !r.Ratio.OK
	}
	return false
}

// Cooling reports whether a breaker as v shows it is open and refuses a
// call at now: its cool-down of delay has not ended. It is the test an
// acquire makes before it half-opens an open breaker, so that a worker
// that saw the breaker open may refuse a call itself until then.
func Cooling(v BreakerView, now time.Time, delay time.Duration) bool {
	return v.State == circuitbreaker.OpenState && now.Before(v.OpenedAt.Add(delay))
}

// Steps implements Stepper: the steps under the one mutex every step of m
// takes.
func (m *Memory) Steps(_ context.Context, steps []Step) ([]StepResult, error) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := Valid(steps); err != nil {
		return nil, err
	}
	out := make([]StepResult, len(steps))
	stopped := false
	for i, s := range steps {
		if stopped {
			out[i].Skipped = true
			continue
		}
		switch {
		case s.Breaker != nil:
			out[i].Breaker = record(m, m.breakers, s.Key, s.Breaker.Now, func(r *BreakerEntry) time.Time { return r.Expires }).Apply(*s.Breaker)
		case s.Draw != nil:
			out[i].Draw = record(m, m.counts, s.Key, now, func(r *CountEntry) time.Time { return r.Expires }).Apply(now, s.Draw.Limit, s.Draw.TTL)
		case s.Ratio != nil:
			out[i].Ratio = record(m, m.ratios, s.Key, s.Ratio.Now, func(r *RatioEntry) time.Time { return r.Expires }).Apply(*s.Ratio)
		}
		stopped = s.Gate && s.Refused(out[i])
	}
	return out, nil
}

var _ Stepper = (*Memory)(nil)

// Watcher is a State that hears of the transitions of its breakers,
// whichever worker made them: Moved returns the highest generation it has
// heard the breaker under key reach (0 if none). A breaker that refuses
// calls itself while the State last showed it open (see [Cooling]) asks
// the State again as soon as Moved passes the generation it saw: a worker
// that closed the breaker (Set, or its probes) lets the others through at
// once, not when their cool-downs end. Without a Watcher they wait for the
// cool-down, which is what the State would answer unless the breaker was
// moved by hand.
type Watcher interface {
	Moved(key string) uint64
}

// Moved implements Watcher: the breaker's generation now, as every
// worker on m sees at once.
func (m *Memory) Moved(key string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.breakers[key]; r != nil {
		return r.Gen
	}
	return 0
}
