package policies

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/common"
	"github.com/failsafe-go/failsafe-go/policy"

	"github.com/retrace-go/retrace/clock"
)

// RetryConfig configures a retry policy. The zero value retries Transient
// errors up to 3 attempts with no delay.
type RetryConfig struct {
	// MaxAttempts counts calls, the first included; 0 → 3, 1 → no retries.
	MaxAttempts int
	// Backoff is the delay before each retry.
	Backoff Backoff
	// MaxRetryAfter caps a server's Retry-After hint; 0 → 60 s. The policy
	// waits the larger of the backoff and the (capped) hint.
	MaxRetryAfter time.Duration
	// Classifier decides what each error means; nil → the default rules.
	Classifier *Classifier
	// RetryUnknown retries errors that no rule recognises (class Unknown).
	RetryUnknown bool

	// Clock is what the policy sleeps on; nil → the wall clock (or, under
	// middleware.PoliciesWith, the clock given there).
	Clock clock.Clock
	// Rand draws the jitter, a number in [0, 1); nil → math/rand/v2. It must
	// be safe for concurrent use; see [SeededRand] for a deterministic one.
	Rand func() float64
	// Budget is failsafe-go's rate-based retry budget, shared across calls;
	// nil → none. A retry it refuses ends with outcome budget_exhausted, as
	// one refused by the task budget ([WithTaskBudget]) does.
	Budget budget.Budget
}

// The seeds' numbers, read exactly (see DESIGN.md).
var (
	// SessionRetry is the agent session's automatic retry: the first call,
	// then 3 retries after 2 s, 4 s and 8 s. Unknown errors are not retried.
	SessionRetry = RetryConfig{MaxAttempts: 4, Backoff: Backoff{Base: 2 * time.Second}}
	// RuntimeRetry is Runtime.exec's loop: 3 attempts, sleeping 1.5 s and 3 s.
	// Anything not known to be permanent is retried.
	RuntimeRetry = RetryConfig{MaxAttempts: 3, Backoff: Backoff{Base: 1500 * time.Millisecond}, RetryUnknown: true}
	// ToolRetry is a tool call's retry: 3 attempts (the first call counts),
	// each delay min(8 s, 0.8 s·2^(n-1)) scaled by a random factor in [0.5, 1].
	ToolRetry = RetryConfig{MaxAttempts: 3, Backoff: Backoff{Base: 800 * time.Millisecond, Cap: 8 * time.Second, Jitter: 0.5}}
)

// SeededRand returns a deterministic jitter source, safe for concurrent use.
func SeededRand(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// Retrier is the decision logic of a retry policy, independent of the result
// type: it classifies each failure, decides whether to retry and how long to
// wait, and draws the retry budgets. It is safe for concurrent use.
type Retrier struct {
	cfg    RetryConfig
	budget rateBudget // cfg.Budget's permit methods, nil if none
}

// rateBudget is the part of failsafe-go's budget that a retry policy drives.
type rateBudget interface {
	RecordExecution()
	ReleaseExecution()
	TryAcquirePermit() bool
	ReleasePermit()
}

// NewRetrier returns the decision logic for cfg, with its defaults filled in.
func NewRetrier(cfg RetryConfig) *Retrier {
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.MaxRetryAfter <= 0 {
		cfg.MaxRetryAfter = 60 * time.Second
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	r := &Retrier{cfg: cfg}
	if cfg.Budget != nil {
		r.budget, _ = cfg.Budget.(rateBudget)
	}
	return r
}

// Config returns the configuration with its defaults filled in.
func (r *Retrier) Config() RetryConfig { return r.cfg }

// MaxAttempts returns the attempt limit, the first call included.
func (r *Retrier) MaxAttempts() int { return r.cfg.MaxAttempts }

// Classify classifies err as the policy sees it (see [ClassifyContext]).
func (r *Retrier) Classify(ctx context.Context, err error) Classification {
	return ClassifyContext(ctx, r.cfg.Classifier, err)
}

// ClassifyContext classifies err with c (nil: the defaults) for a call whose
// context is ctx. An error of class Canceled while ctx is still live came
// from an inner timeout or cancellation, not from the caller: it is Transient.
func ClassifyContext(ctx context.Context, c *Classifier, err error) Classification {
	cl := c.Classify(err)
	if cl.Class == Canceled && ctx.Err() == nil && !strings.HasPrefix(cl.Reason, "explicit") {
		cl.Class, cl.Reason = Transient, "inner timeout or cancellation, not the caller's"
	}
	return cl
}

// Decision is what to do after a failed attempt.
type Decision struct {
	Retry   bool
	Delay   time.Duration // the wait before the next attempt, if Retry
	Outcome Outcome       // the layer's outcome, if not Retry
	Why     string        // why it stopped before its attempts ran out, if it did
	permit  bool          // a rate-budget permit was taken for the retry
}

// Decide decides what follows failed attempt n (from 1) whose error was
// classified as cls; rejected marks a refusal by the layer's own breaker or
// bulkhead. A decision to retry has drawn its retry from the budgets.
func (r *Retrier) Decide(ctx context.Context, clk clock.Clock, n int, cls Classification, rejected bool) Decision {
	switch {
	case ctx.Err() != nil:
		return Decision{Outcome: OutcomeCanceled}
	case rejected:
		return Decision{Outcome: OutcomeRejected}
	case !retryable(cls, r.cfg):
		return Decision{Outcome: OutcomeFailedPermanent}
	case n >= r.cfg.MaxAttempts:
		return Decision{Outcome: OutcomeFailedExhausted}
	}
	delay := max(r.cfg.Backoff.Delay(n, r.cfg.Rand), min(cls.RetryAfter, r.cfg.MaxRetryAfter))
	if deadline, ok := ctx.Deadline(); ok {
		if left := clockOr(clk, r.cfg.Clock).Until(deadline); left <= delay {
			return Decision{Outcome: OutcomeFailedExhausted, Why: fmt.Sprintf(
				"the next retry, in %s, would start after the deadline (%s left)", round(delay), round(max(left, 0)))}
		}
	}
	if b := TaskBudgetFrom(ctx); b != nil && !b.TryDraw() {
		return Decision{Outcome: OutcomeBudgetExhausted, Why: fmt.Sprintf("the task's retry budget of %d is spent", b.Limit())}
	}
	if r.budget != nil {
		if !r.budget.TryAcquirePermit() {
			return Decision{Outcome: OutcomeBudgetExhausted, Why: "the retry budget's rate is exceeded"}
		}
		return Decision{Retry: true, Delay: delay, permit: true}
	}
	return Decision{Retry: true, Delay: delay}
}

func retryable(cls Classification, cfg RetryConfig) bool {
	return cls.Class == Transient || cls.Class == Unknown && cfg.RetryUnknown
}

// Gate is implemented by an Attempter that knows, before a retry, whether its
// next attempt would be refused at once, by a circuit breaker the failed
// attempt has just opened, say. Do asks it before it backs off.
type Gate interface {
	Refusal() *RejectedError
}

func clockOr(clks ...clock.Clock) clock.Clock {
	for _, c := range clks {
		if c != nil {
			return c
		}
	}
	return clock.Real()
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d
}

// Attempter is what [Do] drives: one call per attempt, and a report of each
// attempt's end with the decision that followed.
type Attempter[R any] interface {
	// Attempt makes attempt n (from 1), after a wait of delay.
	Attempt(ctx context.Context, n int, delay time.Duration) (R, error)
	// Classify classifies a failed attempt's error.
	Classify(ctx context.Context, err error) Classification
	// Done reports how attempt n ended: err and its class (zero on success),
	// and the decision taken.
	Done(n int, err error, cls Classification, d Decision)
}

// Report is how a retried call ended.
type Report struct {
	Attempts  int
	Outcome   Outcome
	Diagnosis string       // "failed after 3 attempts: …", "failed permanently: …", …
	Err       *FailedError // nil on success
}

// Do runs a's attempts under r until one succeeds or r decides to stop, and
// sleeps the backoff between them on clk (nil → r's clock → the wall clock).
func Do[R any](ctx context.Context, r *Retrier, clk clock.Clock, a Attempter[R]) (R, Report) {
	clk = clockOr(r.cfg.Clock, clk)
	if r.budget != nil {
		r.budget.RecordExecution()
		defer r.budget.ReleaseExecution()
	}
	var delay time.Duration
	permit := false
	if err := ctx.Err(); err != nil {
		// Canceled before the first attempt: nothing is called.
		var zero R
		cause := context.Cause(ctx)
		return zero, failed(0, Decision{Outcome: OutcomeCanceled, Why: "before the first attempt"},
			Classification{Class: Canceled, Type: errorType(cause), Reason: "context canceled"}, cause)
	}
	for n := 1; ; n++ {
		res, err := a.Attempt(ctx, n, delay)
		if permit {
			r.budget.ReleasePermit()
			permit = false
		}
		if err == nil {
			d := Decision{Outcome: OutcomeSuccess}
			if n > 1 {
				d.Outcome = OutcomeSuccessAfterRetry
			}
			a.Done(n, nil, Classification{}, d)
			rep := Report{Attempts: n, Outcome: d.Outcome}
			if n > 1 {
				rep.Diagnosis = fmt.Sprintf("succeeded on attempt %d", n)
			}
			return res, rep
		}
		cls := a.Classify(ctx, err)
		_, rejected := err.(*RejectedError)
		if g, ok := a.(Gate); ok && !rejected && retryable(cls, r.cfg) && n < r.cfg.MaxAttempts {
			if refusal := g.Refusal(); refusal != nil {
				// The next attempt would be refused at once (the failure
				// just opened the layer's breaker): stop now, without a
				// backoff and without drawing a retry from the budget.
				rejected, err = true, errors.Join(refusal, err)
			}
		}
		d := r.Decide(ctx, clk, n, cls, rejected)
		a.Done(n, err, cls, d)
		if !d.Retry {
			return res, failed(n, d, cls, err)
		}
		permit = d.permit
		if serr := clk.Sleep(ctx, d.Delay); serr != nil {
			if permit {
				r.budget.ReleasePermit()
			}
			d = Decision{Outcome: OutcomeCanceled, Why: fmt.Sprintf("during the %s backoff; the last error was %s", round(d.Delay), brief(err))}
			return res, failed(n, d, Classification{Class: Canceled, Type: errorType(serr), Reason: "context canceled"}, serr)
		}
		delay = d.Delay
	}
}

// failed builds the report of a call that stopped after n attempts.
func failed(n int, d Decision, cls Classification, err error) Report {
	diag := Diagnose(d.Outcome, n, d.Why, cls, err)
	return Report{Attempts: n, Outcome: d.Outcome, Diagnosis: diag, Err: &FailedError{
		Outcome: d.Outcome, Attempts: n, Class: cls.Class, Type: cls.Type, Diagnosis: diag, Err: err,
	}}
}

// Diagnose says why a call stopped, in the words users search for: "failed
// permanently: …", "failed after N attempts: …". Secrets are redacted.
func Diagnose(o Outcome, attempts int, why string, cls Classification, err error) string {
	var b strings.Builder
	switch o {
	case OutcomeFailedPermanent:
		b.WriteString("failed permanently: ")
		b.WriteString(brief(err))
		var inner *FailedError
		if !errors.As(err, &inner) {
			// The innermost layer says why; the layers above it repeat its words.
			fmt.Fprintf(&b, " [%s: %s]", cls.Class, cls.Reason)
		}
		return b.String()
	case OutcomeFailedExhausted:
		fmt.Fprintf(&b, "failed after %s", plural(attempts, "attempt"))
	case OutcomeBudgetExhausted:
		fmt.Fprintf(&b, "retry budget exhausted after %s", plural(attempts, "attempt"))
	case OutcomeRejected:
		fmt.Fprintf(&b, "rejected after %s", plural(attempts, "attempt"))
	case OutcomeCanceled:
		fmt.Fprintf(&b, "canceled after %s", plural(attempts, "attempt"))
	case OutcomeStepLimit:
		fmt.Fprintf(&b, "stopped at the step limit after %s", plural(attempts, "attempt"))
	default:
		b.WriteString(string(o))
	}
	if why != "" {
		b.WriteString(" (")
		b.WriteString(why)
		b.WriteString(")")
	}
	b.WriteString(": ")
	b.WriteString(brief(err))
	return b.String()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// brief is err's text for a diagnosis: redacted, on one line, at most 400 bytes.
func brief(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := Redact(err.Error())
	if strings.TrimSpace(s) == "" {
		s = errorType(err) + " (empty message)"
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

// Retry is the failsafe-go retry policy that [NewRetry] builds. Under
// failsafe.With it behaves like failsafe-go's own; middleware.Policies reads
// its limits (Retrier) for the spans.
type Retry[R any] struct {
	r *Retrier
}

var _ failsafe.Policy[any] = (*Retry[any])(nil)

// NewRetry builds a retry policy that retries only what its classifier says
// may succeed (Transient, and Unknown if cfg.RetryUnknown) and stops at once
// on everything else; waits the larger of its backoff and the server's
// Retry-After (capped by MaxRetryAfter); never sleeps past the context's
// deadline (if the next wait would end after it, it stops and says so); draws
// each retry from the task budget; and ends a backoff sleep as soon as the
// context is canceled. When it gives up it returns a *[FailedError].
func NewRetry[R any](cfg RetryConfig) failsafe.Policy[R] {
	return &Retry[R]{r: NewRetrier(cfg)}
}

// Retrier returns the policy's decision logic and limits.
func (p *Retry[R]) Retrier() *Retrier { return p.r }

// ToExecutor implements failsafe.Policy.
func (p *Retry[R]) ToExecutor(_ R) any { return &retryExecutor[R]{r: p.r} }

// retryExecutor runs the policy inside failsafe.With. failsafe-go creates one
// per execution.
type retryExecutor[R any] struct {
	r *Retrier
}

func (e *retryExecutor[R]) Apply(inner func(failsafe.Execution[R]) *common.PolicyResult[R]) func(failsafe.Execution[R]) *common.PolicyResult[R] {
	return func(exec failsafe.Execution[R]) *common.PolicyResult[R] {
		a := &execAttempter[R]{r: e.r, exec: exec.(policy.ExecutionInternal[R]), inner: inner}
		res, rep := Do[R](exec.Context(), e.r, nil, a)
		if canceled, cr := a.exec.IsCanceledWithResult(); canceled {
			return cr
		}
		if rep.Err == nil {
			return a.last.WithDone(true, true)
		}
		return &common.PolicyResult[R]{Result: res, Error: rep.Err, Done: true}
	}
}

// execAttempter adapts a failsafe-go execution to Do.
type execAttempter[R any] struct {
	r     *Retrier
	exec  policy.ExecutionInternal[R]
	inner func(failsafe.Execution[R]) *common.PolicyResult[R]
	last  *common.PolicyResult[R]
}

func (a *execAttempter[R]) Attempt(ctx context.Context, n int, _ time.Duration) (R, error) {
	if n > 1 {
		if cr := a.exec.InitializeRetry(); cr != nil {
			a.last = cr
			return cr.Result, orCanceled(cr.Error, ctx)
		}
	}
	a.last = a.inner(a.exec)
	if canceled, cr := a.exec.IsCanceledWithResult(); canceled {
		a.last = cr
		return cr.Result, orCanceled(cr.Error, ctx)
	}
	if a.last.Error != nil {
		if cr := a.exec.RecordResult(a.last); cr != nil {
			a.last = cr
			return cr.Result, orCanceled(cr.Error, ctx)
		}
	}
	return a.last.Result, a.last.Error
}

func (a *execAttempter[R]) Classify(ctx context.Context, err error) Classification {
	return a.r.Classify(ctx, err)
}

func (a *execAttempter[R]) Done(int, error, Classification, Decision) {}

func orCanceled(err error, ctx context.Context) error {
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return context.Canceled
}
