package policies

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/common"
	"github.com/failsafe-go/failsafe-go/policy"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/redact"
)

// RetryConfig configures a retry policy. The zero value retries Transient
// errors up to 3 attempts with no delay.
type RetryConfig struct {
	// MaxAttempts counts calls, the first included; 0 → 3, 1 → no retries.
	MaxAttempts int
	// Backoff is the delay before each retry.
	Backoff Backoff
	// MaxRetryAfter is the longest the policy waits before a retry on
	// someone else's word: a server's Retry-After hint is capped at it, and
	// when a circuit breaker beneath refuses the call for longer than it,
	// the policy stops at once with outcome rejected instead of blocking
	// its caller for the breaker's whole cool-down. 0 → 30 s: long enough
	// for the rate-limit hints providers give (seconds), short enough that
	// an agent's turn never hangs for a minute on a tool whose circuit is
	// open; the model is better told at once, and can use another tool.
	MaxRetryAfter time.Duration
	// Classifier decides what each error means; nil → the layer's
	// (middleware.WithClassifier), else the default rules.
	Classifier *Classifier
	// RetryUnknown retries errors that no rule recognises (class Unknown).
	RetryUnknown bool

	// Clock is what the policy sleeps on; nil → the layer's
	// (middleware.WithClock), else the wall clock.
	Clock clock.Clock
	// Rand draws the jitter, a number in [0, 1); nil → math/rand/v2. It must
	// be safe for concurrent use; see [SeededRand] for a deterministic one.
	Rand func() float64
	// Budget is failsafe-go's rate-based retry budget, shared across calls;
	// nil → none. A retry it refuses ends with outcome budget_exhausted, as
	// one refused by the task budget ([WithTaskBudget]) does.
	Budget budget.Budget
}

// The presets: what an agent runtime, its session and its tools do by
// default. A config that leaves MaxAttempts zero takes a preset field by
// field ([RetryConfig.OrPreset]).
var (
	// SessionRetry is the agent session's automatic retry: the first call,
	// then 3 retries after 2 s, 4 s and 8 s. Unknown errors are not retried:
	// a session retries only what it knows to be transient.
	SessionRetry = RetryConfig{MaxAttempts: 4, Backoff: Backoff{Base: 2 * time.Second}}
	// RuntimeRetry is a runtime's exec loop: 3 attempts, sleeping 1.5 s and
	// 3 s. Anything not known to be permanent is retried.
	RuntimeRetry = RetryConfig{MaxAttempts: 3, Backoff: Backoff{Base: 1500 * time.Millisecond}, RetryUnknown: true}
	// ToolRetry is a tool call's retry: 3 attempts (the first call counts),
	// each delay min(8 s, 0.8 s·2^(n-1)) scaled by a random factor in [0.5, 1].
	ToolRetry = RetryConfig{MaxAttempts: 3, Backoff: Backoff{Base: 800 * time.Millisecond, Cap: 8 * time.Second, Jitter: 0.5}}
)

// OrPreset returns c with every field it leaves zero taken from preset,
// when c leaves MaxAttempts zero; otherwise c as it is. Nothing c sets (its
// Classifier, Clock, Rand, Budget, any limit) is dropped.
func (c RetryConfig) OrPreset(preset RetryConfig) RetryConfig {
	if c.MaxAttempts != 0 {
		return c
	}
	c.MaxAttempts = preset.MaxAttempts
	c.Backoff.Base = or(c.Backoff.Base, preset.Backoff.Base)
	c.Backoff.Cap = or(c.Backoff.Cap, preset.Backoff.Cap)
	c.Backoff.Jitter = or(c.Backoff.Jitter, preset.Backoff.Jitter)
	c.MaxRetryAfter = or(c.MaxRetryAfter, preset.MaxRetryAfter)
	c.RetryUnknown = c.RetryUnknown || preset.RetryUnknown
	c.Classifier = or(c.Classifier, preset.Classifier)
	c.Clock = or(c.Clock, preset.Clock)
	if c.Rand == nil {
		c.Rand = preset.Rand
	}
	c.Budget = or(c.Budget, preset.Budget)
	return c
}

func or[T comparable](v, preset T) T {
	var zero T
	if v == zero {
		return preset
	}
	return v
}

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

// Retry is the failsafe-go retry policy that [NewRetry] builds. It is safe
// for concurrent use.
type Retry[R any] struct {
	cfg  RetryConfig
	exec *retryExecutor[R]
}

var _ failsafe.Policy[any] = (*Retry[any])(nil)

// NewRetry builds a retry policy that retries only what its classifier says
// may succeed (Transient, and Unknown if cfg.RetryUnknown) and stops at once
// on everything else; waits the larger of its backoff and the server's
// Retry-After (capped by MaxRetryAfter); stops at once when a circuit beneath
// stays open longer than MaxRetryAfter; never sleeps past the context's
// deadline (if the next wait would end after it, it stops and says so); draws
// each retry from the task budget; and ends a backoff sleep as soon as the
// context is canceled. When it gives up it returns an *[Error] that says why.
//
// Under failsafe.With it behaves like failsafe-go's own retry policy; under
// middleware.Policies its attempts are spans and its limits are on the
// layer's span.
func NewRetry[R any](cfg RetryConfig) *Retry[R] {
	cfg.MaxAttempts = max(cfg.MaxAttempts, 0)
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.MaxRetryAfter <= 0 {
		cfg.MaxRetryAfter = 30 * time.Second
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	p := &Retry[R]{cfg: cfg}
	e := &engine.Retry{MaxAttempts: cfg.MaxAttempts, MaxRetryAfter: cfg.MaxRetryAfter, RetryUnknown: cfg.RetryUnknown, Clock: cfg.Clock}
	if cfg.Backoff.Base > 0 {
		b, rnd := cfg.Backoff, cfg.Rand
		e.Backoff = func(n int) time.Duration { return b.Delay(n, rnd) }
	}
	if rb, ok := cfg.Budget.(*RetryBudget); ok && rb.cfg.State != nil {
		e.Rate = batchRate{rb}
	} else if cfg.Budget != nil {
		e.Rate, _ = cfg.Budget.(engine.RateBudget)
	}
	p.exec = &retryExecutor[R]{judge: judge{classifier: cfg.Classifier, diags: new(diagnoses)}, engine: e}
	return p
}

// Config returns the configuration with its defaults filled in.
func (p *Retry[R]) Config() RetryConfig { return p.cfg }

// ToExecutor implements failsafe.Policy.
func (p *Retry[R]) ToExecutor(_ R) any { return p.exec }

// retryExecutor runs the policy inside failsafe.With, and is how package
// middleware finds the policy's engine and judge: the only way in, so that
// none of it is public API.
type retryExecutor[R any] struct {
	judge
	engine *engine.Retry
}

// Engine returns the policy's limits, as the engine runs them.
func (e *retryExecutor[R]) Engine() *engine.Retry { return e.engine }

func (e *retryExecutor[R]) Apply(inner func(failsafe.Execution[R]) *common.PolicyResult[R]) func(failsafe.Execution[R]) *common.PolicyResult[R] {
	return func(exec failsafe.Execution[R]) *common.PolicyResult[R] {
		a := &execAttempter[R]{e: e, exec: exec.(policy.ExecutionInternal[R]), inner: inner}
		res, rep := engine.Do[R](exec.Context(), e.engine, nil, a)
		if canceled, cr := a.exec.IsCanceledWithResult(); canceled {
			return cr
		}
		if rep.Err == nil && rep.Cause == nil {
			return a.last.WithDone(true, true)
		}
		return &common.PolicyResult[R]{Result: res, Error: e.Fail(exec.Context(), "", rep, a.cls, trace.SpanContext{}), Done: true}
	}
}

// execAttempter adapts a failsafe-go execution to the engine's loop.
type execAttempter[R any] struct {
	e     *retryExecutor[R]
	exec  policy.ExecutionInternal[R]
	inner func(failsafe.Execution[R]) *common.PolicyResult[R]
	last  *common.PolicyResult[R]
	cls   Classification
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

// Judge classifies a failed attempt. Under failsafe.With a rejection by a
// breaker or bulkhead composed inside the retry is the policy's own.
func (a *execAttempter[R]) Judge(ctx context.Context, err error) engine.Failure {
	var f engine.Failure
	a.cls, f = a.e.Judge(ctx, nil, err)
	if e, ok := err.(*Error); ok && isRejection(e) {
		f.Rejected, f.Held = true, false
	}
	return f
}

func (a *execAttempter[R]) Done(int, error, engine.Decision) {}

func orCanceled(err error, ctx context.Context) error {
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return context.Canceled
}

// judge is what a layer knows of errors: its classifier, and how a failure
// is worded. Package middleware reaches it through a retry policy's
// executor, so that both ways of running a policy judge alike.
type judge struct {
	classifier *Classifier // the policy's own; nil → the layer's, else the defaults
	diags      *diagnoses  // the last diagnosis its stops were worded with; nil: none is kept
}

// Classifier returns the policy's own classifier, nil if it has none.
func (j judge) Classifier() *Classifier { return j.classifier }

// Judge classifies err as the layer sees it, with the policy's classifier,
// else fallback, else the defaults: its classification for the spans and
// what the retry loop needs of it. An error of class Canceled while ctx is
// still live came from an inner timeout or cancellation, not from the
// caller: it is Transient, unless its class was given explicitly.
func (j judge) Judge(ctx context.Context, fallback *Classifier, err error) (Classification, engine.Failure) {
	c := j.classifier
	if c == nil {
		c = fallback
	}
	return j.Judged(ctx, c.Classify(err), err)
}

// Judged is Judge of an error whose classification is known already: a
// layer beneath classified it with the same classifier, and the
// classification is carried up, not worked out again. What is left is the
// context's part, which the layer beneath could not judge for this one.
func (judge) Judged(ctx context.Context, cls Classification, err error) (Classification, engine.Failure) {
	if cls.Class == Canceled && ctx.Err() == nil {
		if _, explicit := errors.AsType[*Error](err); !explicit {
			cls.Class, cls.Reason = Transient, "an inner timeout or cancellation, not the caller's"
		}
	}
	f := engine.Failure{Class: string(cls.Class), RetryAfter: cls.RetryAfter}
	if rej, ok := errors.AsType[*Error](err); ok && rej.Type == typeCircuitOpen && rej.Outcome == "" {
		f.Held = true
	}
	return cls, f
}

// Fail is the error a layer returns when it stops: an *Error that says why
// (and carries the server's answer, if the failure was one), or, when the
// layer made one attempt and stops on an inner layer's stop for the same
// reason, that stop again, so that a failure reads once however many
// layers it crosses.
//
// span is the layer's span when it records (failure.SpanOf), else the zero
// SpanContext; the error names it (Error.SpanContext). A stop passed up
// names the outermost span that recorded it: it is returned as it is when
// span is not valid, else as a copy naming span (the copy reads as the stop
// does, with its Layer, and shares its diagnosis). A copy, not a write:
// the stop beneath may be held elsewhere (a handler may share one result
// among callers), and an Error is never written once returned.
func (j judge) Fail(ctx context.Context, layer string, rep engine.Report, cls Classification, span trace.SpanContext) error {
	if inner, ok := rep.Err.(*Error); ok && inner.Outcome != "" && rep.Attempts == 1 && rep.Why == "" && rep.Cause == nil &&
		inner.Outcome == rep.Outcome {
		return inner.naming(span)
	}
	class := cls.Class
	if rep.Cause != nil {
		class = Canceled
	}
	// The stop, its diagnosis and the span's IDs are one allocation; an
	// untraced stop makes none for the IDs.
	var fe *Error
	var d *diagnosis
	if span.IsValid() {
		s := &struct {
			e  Error
			d  diagnosis
			at spanIDs
		}{at: spanIDs{trace: span.TraceID(), span: span.SpanID()}}
		fe, d = &s.e, &s.d
		fe.at = &s.at
	} else {
		s := &struct {
			e Error
			d diagnosis
		}{}
		fe, d = &s.e, &s.d
	}
	d.memo = j.diags
	*fe = Error{
		at:    fe.at,
		diag:  d,
		Layer: layer, Outcome: rep.Outcome, Attempts: rep.Attempts, Class: class, Type: cls.Type,
		Reason: cls.Reason, Detail: rep.Why, Err: rep.Err, RetryAfter: cls.RetryAfter, cause: rep.Cause,
		known: engine.SecretsFrom(ctx),
	}
	if fe.Err == nil {
		fe.Err = rep.Cause
	}
	if rep.Cause != nil && fe.Type == "" {
		fe.Type = errorType(rep.Cause)
	}
	if len(fe.known) > 0 {
		redactAPIErrors(fe.Err, fe.known)
	}
	if cls.Class == Programming {
		if p, ok := errors.AsType[*Error](rep.Err); ok {
			fe.Stack = p.Stack // a panic's stack, for the one errors.As
		}
	}
	if a := cls.answer; a != nil {
		// The answer rides on the stop, so that one errors.As reads it.
		fe.StatusCode, fe.Code, fe.Message = a.StatusCode, a.Code, a.Message
		if len(fe.known) > 0 && a != fe.Err {
			fe.Code, fe.Message = redact.Known(fe.Code, fe.known), redact.Known(fe.Message, fe.known)
		}
	}
	return fe
}

// naming returns e naming span: e itself when span is not valid or e names
// it already, else a copy of e that names it.
func (e *Error) naming(span trace.SpanContext) *Error {
	if !span.IsValid() || e.names(span) {
		return e
	}
	s := &struct {
		e  Error
		at spanIDs
	}{e: *e, at: spanIDs{trace: span.TraceID(), span: span.SpanID()}}
	s.e.at = &s.at
	return &s.e
}

// Named is err as a layer without a retry returns it, its span span: a
// stop a handler made of its own (an Outcome, and no span named: an agent
// loop's step limit) names span, through a copy (a handler's stop may be a
// value it shares); any other error is returned unchanged, since a layer
// that does not retry passes its handler's error through as it is.
func (judge) Named(err error, span trace.SpanContext) error {
	if fe, ok := err.(*Error); ok && fe.Outcome != "" && fe.at == nil {
		return fe.naming(span)
	}
	return err
}

// Mark names span on e, an Error the layer made in this call (a refusal, a
// timeout, a panic) and returns to its caller without a stop around it. e
// is new and not yet returned, so the write is e's first and only one.
func (judge) Mark(e *Error, span trace.SpanContext) {
	if e.at == nil {
		e.at = idsOf(span)
	}
}
