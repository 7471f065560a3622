package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/telemetry"
)

// Retry is a retry policy's limits, with its defaults filled in by package
// policies. It is read-only once built and safe for concurrent use.
type Retry struct {
	MaxAttempts   int                       // calls, the first included; at least 1
	Backoff       func(n int) time.Duration // the delay before retry n (from 1), jitter drawn
	MaxRetryAfter time.Duration             // the longest wait for a server's hint or an inner circuit's cool-down
	RetryUnknown  bool                      // retry errors no rule recognises
	Clock         clock.Clock               // the policy's own clock; nil → the layer's
	Rate          RateBudget                // failsafe-go's rate budget; nil → none
}

// RateBudget is the part of failsafe-go's retry budget that a retry loop
// drives.
type RateBudget interface {
	RecordExecution()
	ReleaseExecution()
	TryAcquirePermit() bool
	ReleasePermit()
}

// Failure is what the loop needs to know of a failed attempt.
type Failure struct {
	Class      string        // the error's class
	RetryAfter time.Duration // the server's hint, or the remaining cool-down of a circuit that refused the call
	Held       bool          // RetryAfter is a circuit's cool-down: a breaker beneath refused the call
	Rejected   bool          // this layer's own breaker or bulkhead refused the call
}

// Retryable reports whether r retries a failure of class.
func (r *Retry) Retryable(class string) bool {
	return class == Transient || class == Unknown && r.RetryUnknown
}

// Decision is what follows a failed attempt.
type Decision struct {
	Retry   bool
	Delay   time.Duration // the wait before the next attempt, if Retry
	Outcome string        // the layer's outcome, if not Retry
	Why     string        // why it stopped before its attempts ran out, if it did
	Refusal error         // the gate's refusal that stopped it, if one did
	State   state.Use     // where a budget with a shared State decided, if one did
	permit  bool          // a rate-budget permit was taken for the retry
}

// Attempter is what [Do] drives: one call per attempt, the judgement of each
// failure, and a report of each attempt's end with the decision that followed.
type Attempter[R any] interface {
	// Attempt makes attempt n (from 1), after a wait of delay.
	Attempt(ctx context.Context, n int, delay time.Duration) (R, error)
	// Judge says what a failed attempt's error means.
	Judge(ctx context.Context, err error) Failure
	// Done reports how attempt n ended (err nil on success) and what follows.
	Done(n int, err error, d Decision)
}

// Gate is implemented by an Attempter that knows, before a retry, that its
// next attempt would be refused at once: by a breaker inside the loop that
// the failed attempt has just opened. It returns the refusal's error, or nil.
type Gate interface {
	Refusal() error
}

// Report is how a retried call ended.
type Report struct {
	Attempts int
	Outcome  string
	Why      string  // why it stopped before its attempts ran out, if it did
	Err      error   // the last attempt's error; nil on success
	Failure  Failure // what the loop knew of that error
	Cause    error   // the context's cause, when the caller's context ended the call
}

// Do runs a's attempts under r until one succeeds or r decides to stop,
// sleeping the backoff between them on r's clock, else clk, else the wall
// clock. It returns within a millisecond of ctx's end, also mid-backoff.
func Do[R any](ctx context.Context, r *Retry, clk clock.Clock, a Attempter[R]) (R, Report) {
	clk = Or(r.Clock, clk)
	// The call's steps on a shared State that need no answer of their own
	// wait here for the next step that does: the rate budget's record of
	// the call goes with the breaker's acquire, an attempt's failure with
	// the retry's draw. What is left when the call ends is sent then.
	var pend *Pending
	if u, ok := a.(PendingUser); ok {
		pend = u.Pending()
	} else {
		pend = new(Pending)
	}
	defer pend.flush(stateCtx())
	if r.Rate != nil {
		if d, _, ok := batchable(ctx, r.Rate, true); ok {
			pend.Add(d)
		} else {
			r.Rate.RecordExecution()
		}
		defer r.Rate.ReleaseExecution()
	}
	var zero R
	if ctx.Err() != nil {
		// Canceled before the first attempt: nothing is called.
		return zero, Report{Outcome: telemetry.OutcomeCanceled, Why: "before the first attempt", Cause: context.Cause(ctx),
			Failure: Failure{Class: Canceled}}
	}
	var delay time.Duration
	permit := false // a rate-budget permit is held for the retry in flight
	for n := 1; ; n++ {
		res, err := a.Attempt(ctx, n, delay)
		if permit {
			r.Rate.ReleasePermit()
			permit = false
		}
		if err == nil {
			d := Decision{Outcome: telemetry.OutcomeSuccess}
			if n > 1 {
				d.Outcome = telemetry.OutcomeSuccessAfterRetry
			}
			a.Done(n, nil, d)
			return res, Report{Attempts: n, Outcome: d.Outcome}
		}
		f := a.Judge(ctx, err)
		g, _ := a.(Gate)
		d := r.decide(ctx, clk, n, f, g, pend)
		a.Done(n, err, d)
		if !d.Retry {
			if d.Refusal != nil {
				err = errors.Join(d.Refusal, err)
			}
			rep := Report{Attempts: n, Outcome: d.Outcome, Why: d.Why, Err: err, Failure: f}
			if d.Outcome == telemetry.OutcomeCanceled {
				rep.Cause = context.Cause(ctx)
			}
			return res, rep
		}
		if serr := sleep(ctx, clk, d.Delay); serr != nil {
			if d.permit {
				r.Rate.ReleasePermit()
			}
			return res, Report{Attempts: n, Outcome: telemetry.OutcomeCanceled, Err: err, Failure: f, Cause: serr,
				Why: "during the " + Round(d.Delay).String() + " backoff"}
		}
		permit = d.permit
		delay = d.Delay
	}
}

// Decide decides what follows failed attempt n, asking g (if not nil)
// whether the next attempt would be refused at once. A decision to retry
// has drawn its retry from the budgets (Do holds a rate-budget permit while
// the retry runs, and releases it when the retry ends).
func (r *Retry) Decide(ctx context.Context, clk clock.Clock, n int, f Failure, g Gate) Decision {
	return r.decide(ctx, clk, n, f, g, nil)
}

// decide is Decide for a call whose steps on a shared State may be pending
// in pend.
func (r *Retry) decide(ctx context.Context, clk clock.Clock, n int, f Failure, g Gate, pend *Pending) Decision {
	switch {
	case ctx.Err() != nil:
		return Decision{Outcome: telemetry.OutcomeCanceled}
	case f.Rejected:
		return Decision{Outcome: telemetry.OutcomeRejected}
	case !r.Retryable(f.Class):
		return Decision{Outcome: StopOutcome(f.Class)}
	case n >= r.MaxAttempts && f.Held:
		// The last attempt was refused by a breaker beneath: the call did
		// not run out of attempts on the downstream, it was kept from it.
		return Decision{Outcome: telemetry.OutcomeRejected, Why: "a circuit beneath refused the last attempt"}
	case n >= r.MaxAttempts:
		return Decision{Outcome: telemetry.OutcomeFailedExhausted}
	}
	if d, refused := refuse(g); refused {
		return d
	}
	var stop *Decision
	switch {
	case f.Held && f.RetryAfter > r.MaxRetryAfter:
		// A breaker beneath refused the call for longer than this layer
		// waits: waiting it out would block the caller for its whole
		// cool-down, and retrying sooner is refused again.
		stop = &Decision{Outcome: telemetry.OutcomeRejected, Why: fmt.Sprintf(
			"a circuit beneath stays open for another %s, longer than the %s this layer waits", Round(f.RetryAfter), Round(r.MaxRetryAfter))}
	}
	delay := min(f.RetryAfter, r.MaxRetryAfter)
	if r.Backoff != nil {
		delay = max(delay, r.Backoff(n))
	}
	if deadline, ok := ctx.Deadline(); ok && stop == nil {
		if left := clk.Until(deadline); left <= delay {
			stop = &Decision{Outcome: telemetry.OutcomeFailedExhausted, Why: fmt.Sprintf(
				"the next retry, in %s, would start after the deadline (%s left)", Round(delay), Round(max(left, 0)))}
		}
	}
	// With the budgets on a state.Stepper, the attempt's pending failure,
	// the task budget's draw and the rate budget's retry are one batch,
	// each step a gate: a failure that opened the breaker stops the draw.
	// A refused attempt reached nothing: its retry draws from no budget.
	var decided [2]func() (bool, state.Use)
	batched := false
	if stop == nil && !f.Held {
		decided, batched = r.drawBatched(ctx, pend)
	} else if g != nil {
		// The gate reads the breaker as the failure left it.
		pend.flush(stateCtx())
	}
	if d, refused := refuse(g); refused {
		return d
	}
	if stop != nil {
		return *stop
	}
	if f.Held {
		// A refused attempt reached nothing: its retry is not one the
		// budgets bound (they bound what retries cost the downstream), and
		// the attempts it may take are still the layer's MaxAttempts.
		return Decision{Retry: true, Delay: delay}
	}
	var use state.Use
	if b := BudgetFrom(ctx); b != nil {
		var ok bool
		var u state.Use
		if batched {
			ok, u = decided[0]()
		} else {
			ok, u = DrawFrom(ctx, b)
		}
		if use = u; !ok {
			return Decision{Outcome: telemetry.OutcomeBudgetExhausted, Why: fmt.Sprintf("the task's retry budget of %d is spent", b.Limit()), State: use}
		}
	}
	if r.Rate != nil {
		var ok bool
		var u state.Use
		if batched {
			ok, u = decided[1]()
		} else {
			ok, u = acquireRate(ctx, r.Rate)
		}
		if use = use.Merge(u); !ok {
			return Decision{Outcome: telemetry.OutcomeBudgetExhausted, Why: "the retry budget's rate is exceeded", State: use}
		}
		return Decision{Retry: true, Delay: delay, permit: true, State: use}
	}
	return Decision{Retry: true, Delay: delay, State: use}
}

// refuse asks g (if not nil) whether the next attempt would be refused at
// once: the failure just opened the layer's own breaker. The loop then
// stops without a backoff and without drawing a retry from the budget.
func refuse(g Gate) (Decision, bool) {
	if g == nil {
		return Decision{}, false
	}
	if refusal := g.Refusal(); refusal != nil {
		return Decision{Outcome: telemetry.OutcomeRejected, Refusal: refusal}, true
	}
	return Decision{}, false
}

// drawBatched makes the retry's steps on the shared State in one batch
// when every budget of the retry can travel in one (on the same
// state.Stepper as the call's pending steps): the pending steps, the task
// budget's draw, the rate budget's retry, in that order, each stopping the
// batch if it refuses. It returns the budgets' decisions (task, rate; a
// missing budget's says yes) and true, or false when the steps cannot be batched: the
// pending steps are then sent alone, and the budgets decide as they would
// without a batch.
func (r *Retry) drawBatched(ctx context.Context, pend *Pending) (decided [2]func() (bool, state.Use), batched bool) {
	// The call's held records count first: the retry's ask carries them.
	pend.settleHeld()
	b := BudgetFrom(ctx)
	if b == nil && r.Rate == nil {
		// No budget to draw from: the pending steps go alone, and the
		// local path allocates nothing here.
		pend.flush(stateCtx())
		return decided, false
	}
	yes := func() (bool, state.Use) { return true, state.Use{} }
	decided = [2]func() (bool, state.Use){yes, yes}
	var ds []Deferred
	var st state.State
	same := true
	if b != nil {
		d, dec, ok := batchable(ctx, b, false)
		if !ok {
			same = false
		} else {
			ds, st, decided[0] = append(ds, d), d.State, dec
		}
	}
	if r.Rate != nil && same {
		d, dec, ok := batchable(ctx, r.Rate, false)
		if !ok || st != nil && d.State != st {
			same = false
		} else {
			ds, st, decided[1] = append(ds, d), d.State, dec
		}
	}
	if _, stepper := st.(state.Stepper); !same || !stepper {
		pend.flush(stateCtx())
		return decided, false
	}
	mine := pend.take(st)
	pend.flush(stateCtx()) // steps on other States than the budgets'
	run(stateCtx(), st, append(mine, ds...))
	return decided, true
}

// batchable returns x's deferred step, if x is a Batchable budget with a
// shared state.Stepper.
func batchable(ctx context.Context, x any, call bool) (Deferred, func() (bool, state.Use), bool) {
	bx, ok := x.(Batchable)
	if !ok {
		return Deferred{}, nil, false
	}
	return bx.Deferred(ctx, call)
}

// Or returns the first non-nil clock, else the wall clock.
func Or(clks ...clock.Clock) clock.Clock {
	for _, c := range clks {
		if c != nil {
			return c
		}
	}
	return clock.Real()
}

// Round rounds d for a message: to 100 ms above a second, to 1 ms above a
// millisecond.
func Round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d
}

// sleep waits d on clk, or until ctx ends. A retry without a delay does not
// ask the clock to wait.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	if d <= 0 {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
	return clk.Sleep(ctx, d)
}
