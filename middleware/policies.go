package middleware

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// scope is the instrumentation scope of retrace's spans and metrics.
const scope = "github.com/retrace-go/retrace"

// Policies runs the handler through the failsafe-go policies ps, listed
// outermost first as in failsafe.With, with the global tracer and meter
// providers as they are at call time. See [PoliciesWith].
func Policies[Req, Resp any](layer string, ps ...failsafe.Policy[Resp]) Middleware[Req, Resp] {
	return PoliciesWith[Req, Resp](layer, nil, ps...)
}

// PoliciesWith runs the handler through the failsafe-go policies ps, listed
// outermost first as in failsafe.With, and traces it:
//
//   - a layer span (retrace.layer=layer) covers the whole call and ends with
//     retrace.outcome, retrace.attempts and, on failure, retrace.diagnosis;
//     the outermost layer span also gets retrace.calls and
//     retrace.calls.worst_case;
//   - a retrying layer opens one child span per attempt (retrace.attempt,
//     retrace.retry.delay_ms); a failed attempt has status Error,
//     retrace.error.class and error.type, and an error that a retry then
//     fixed stays on its attempt span;
//   - inside each attempt, a circuit breaker, bulkhead or timeout that acts
//     opens a span of its own around the inner handler ([WithPolicySpans]).
//
// The retry policy from policies.NewRetry is driven by retrace itself, so
// spans know its limits; a circuit breaker (any
// circuitbreaker.CircuitBreaker) and the bulkhead and timeout from policies
// are driven through their permit APIs, so that each attempt's context, with
// its span, reaches the handler. Any other failsafe-go policy (a plain
// retrypolicy, a rate limiter, a fallback, a hedge) runs through failsafe-go's
// executor, with attempt spans for a plain retry policy too.
//
// Each span gets its retrace attributes in one call when it ends, which is
// what the SDK makes cheapest; a head sampler sees only the span's name and
// the attributes given with WithAttributes.
//
// A failed call returns a *policies.FailedError that wraps the last error. A
// panic in the handler is recovered into a *policies.PanicError (class
// Programming, never retried) so that no permit leaks; it is the one place
// retrace recovers panics.
func PoliciesWith[Req, Resp any](layer string, opts []Option, ps ...failsafe.Policy[Resp]) Middleware[Req, Resp] {
	l := newLayer[Req, Resp](layer, newConfig(opts), ps)
	return func(next Handler[Req, Resp]) Handler[Req, Resp] {
		body := l.build(next)
		return func(ctx context.Context, req Req) (Resp, error) {
			return l.serve(ctx, req, body)
		}
	}
}

// layer is what PoliciesWith builds once and every call shares.
type layer[Req, Resp any] struct {
	name          string
	spanName      string
	attemptName   string
	cfg           config
	ps            []failsafe.Policy[Resp]
	retryAt       int               // index in ps of the retry policy retrace drives, -1 if none
	retrier       *policies.Retrier // that policy's logic, nil if none
	maxAttempts   int               // 0 when a retry policy's limit is unknown
	frameAttempts int               // maxAttempts times the handler's own attempts (WithInnerAttempts)
	foreignRetry  bool              // a failsafe-go retry policy retrace cannot read
	classifier    *policies.Classifier
	clock         clock.Clock
	startOpts     []trace.SpanStartOption
	tracer        atomic.Pointer[tracerFor]
	gates         []breakerCounts // the breakers inside the retry loop, asked before a retry
	meter         *instruments
}

type tracerFor struct {
	tp     trace.TracerProvider
	tracer trace.Tracer
}

// retrierOf is implemented by the retry policy from policies.NewRetry.
type retrierOf interface{ Retrier() *policies.Retrier }

func newLayer[Req, Resp any](name string, cfg config, ps []failsafe.Policy[Resp]) *layer[Req, Resp] {
	l := &layer[Req, Resp]{name: name, cfg: cfg, retryAt: -1, maxAttempts: 1, clock: cfg.clock}
	for _, p := range ps {
		if p != nil {
			l.ps = append(l.ps, p)
		}
	}
	for i, p := range l.ps {
		if r, ok := p.(retrierOf); ok && l.retryAt < 0 {
			l.retryAt, l.retrier = i, r.Retrier()
			l.maxAttempts = r.Retrier().MaxAttempts()
		} else if isFailsafe(p, "retrypolicy") {
			l.foreignRetry, l.maxAttempts = true, 0
		}
	}
	l.classifier = cfg.classifier
	if l.retrier != nil && l.retrier.Config().Classifier != nil {
		l.classifier = l.retrier.Config().Classifier
	}
	if l.foreignRetry {
		l.maxAttempts = 0 // a failsafe-go retry policy does not say its limit
	}
	l.frameAttempts = l.maxAttempts
	if cfg.inner > 1 {
		l.frameAttempts *= cfg.inner
	}
	l.spanName = cfg.spanName
	if l.spanName == "" {
		l.spanName = name
	}
	l.attemptName = name + " attempt"
	// The layer span is born with the user's attributes; retrace's are set
	// once, when it ends.
	if len(cfg.attrs) > 0 {
		l.startOpts = []trace.SpanStartOption{trace.WithAttributes(cfg.attrs...)}
	}
	if cfg.kind != trace.SpanKindInternal {
		l.startOpts = append(l.startOpts, trace.WithSpanKind(cfg.kind))
	}
	mp := cfg.mp
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	l.meter = newInstruments(mp, name)
	return l
}

// isFailsafe reports whether p is a failsafe-go policy from package pkg.
func isFailsafe(p any, pkg string) bool {
	t := reflect.TypeOf(p)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath() == "github.com/failsafe-go/failsafe-go/"+pkg
}

// tracerNow returns the tracer of the configured provider or, without one,
// of the global provider as it is now.
func (l *layer[Req, Resp]) tracerNow() trace.Tracer {
	tp := l.cfg.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if t := l.tracer.Load(); t != nil && t.tp == tp {
		return t.tracer
	}
	t := &tracerFor{tp: tp, tracer: tp.Tracer(scope)}
	l.tracer.Store(t)
	return t.tracer
}

// step is one stage of a layer: a policy around the rest of the chain.
type step[Req, Resp any] func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error)

// build composes the layer's steps around next: the policies before the
// retry policy run once per call, the retry loop runs the rest per attempt.
func (l *layer[Req, Resp]) build(next Handler[Req, Resp]) step[Req, Resp] {
	s := leafStep(next)
	if l.retryAt < 0 {
		return l.wrap(l.ps, s)
	}
	s = l.wrap(l.ps[l.retryAt+1:], s)
	for _, p := range l.ps[l.retryAt+1:] {
		if g, ok := p.(breakerCounts); ok {
			l.gates = append(l.gates, g)
		}
	}
	s = l.loopStep(s)
	return l.wrap(l.ps[:l.retryAt], s)
}

// wrap wraps s in the policies ps, outermost first. Consecutive policies that
// retrace does not drive itself share one failsafe-go executor.
func (l *layer[Req, Resp]) wrap(ps []failsafe.Policy[Resp], s step[Req, Resp]) step[Req, Resp] {
	for i := len(ps) - 1; i >= 0; {
		switch p := ps[i].(type) {
		case circuitbreaker.CircuitBreaker[Resp]:
			s = l.breakerStep(p, s)
		case *policies.Bulkhead[Resp]:
			s = l.bulkheadStep(p, s)
		case *policies.Timeout[Resp]:
			s = l.timeoutStep(p, s)
		default:
			j := i
			for j > 0 && !l.drives(ps[j-1]) {
				j--
			}
			s = l.foreignStep(ps[j:i+1], s)
			i = j
		}
		i--
	}
	return s
}

func (l *layer[Req, Resp]) drives(p failsafe.Policy[Resp]) bool {
	switch p.(type) {
	case circuitbreaker.CircuitBreaker[Resp], *policies.Bulkhead[Resp], *policies.Timeout[Resp]:
		return true
	}
	return false
}

// call is one call through a layer; it is allocated once per call and
// carries everything the steps share.
type call[Req, Resp any] struct {
	l         *layer[Req, Resp]
	req       Req
	inner     step[Req, Resp] // the per-attempt chain the retry loop runs
	frame     frame
	root      root
	fctx      frameCtx
	span      trace.Span // the layer span
	aspan     trace.Span // the current attempt span, nil outside an attempt or when not recording
	recording bool
	attempts  int
	lastEnd   time.Time // when the previous attempt ended (for a failsafe-go retry's delay)
	lastErr   error     // the last classified error and its class
	lastCls   policies.Classification
	report    *policies.Report
}

// current is the span that policy state without a span of its own goes on.
func (c *call[Req, Resp]) current() trace.Span {
	if c.aspan != nil {
		return c.aspan
	}
	return c.span
}

func (l *layer[Req, Resp]) serve(ctx context.Context, req Req, body step[Req, Resp]) (Resp, error) {
	c := &call[Req, Resp]{l: l, req: req}
	parent := frameFrom(ctx)
	c.frame.init(parent, l.name, l.frameAttempts, &c.root)
	c.fctx = frameCtx{Context: ctx, f: &c.frame}
	ctx, c.span = l.tracerNow().Start(&c.fctx, l.spanName, l.startOpts...)
	c.recording = c.span.IsRecording()
	if c.recording {
		if parent == nil {
			c.root.span = c.span
		} else {
			c.frame.announceNesting()
		}
	}

	resp, err := body(ctx, c, req)

	rep := c.report
	if rep == nil || (err != nil && err != error(rep.Err)) {
		rep = l.finalReport(ctx, c, err)
		if rep.Err != nil {
			err = rep.Err
		}
	}
	if rep.Err != nil {
		rep.Err.Layer = l.name
	}
	c.frame.reportWorst()
	if c.recording {
		l.endSpan(c, rep, err)
	}
	c.span.End()
	l.meter.record(ctx, rep)
	return resp, err
}

// endSpan sets the layer span's attributes, all in one call: the limit,
// the depth, how the call ended and, on the outermost layer, the counts.
func (l *layer[Req, Resp]) endSpan(c *call[Req, Resp], rep *policies.Report, err error) {
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, telemetry.Layer.String(l.name))
	if l.maxAttempts > 0 {
		attrs = append(attrs, telemetry.MaxAttempts.Int(l.maxAttempts))
	}
	attrs = append(attrs, telemetry.RetryDepth.Int(c.frame.depth),
		telemetry.Attempts.Int(rep.Attempts), telemetry.Outcome.String(string(rep.Outcome)))
	if rep.Diagnosis != "" {
		attrs = append(attrs, telemetry.Diagnosis.String(rep.Diagnosis))
	}
	if b := policies.TaskBudgetFrom(c.fctx.Context); b != nil {
		attrs = append(attrs, telemetry.BudgetLeft.Int(b.Remaining()))
	}
	if c.frame.parent == nil {
		attrs = append(attrs, telemetry.Calls.Int64(c.root.calls.Load()))
		if w := c.frame.worst(); w > 0 {
			attrs = append(attrs, telemetry.CallsWorstCase.Int64(w))
		}
	}
	if err != nil && rep.Err != nil {
		attrs = telemetry.AppendFailure(attrs, policies.Classification{Class: rep.Err.Class, Type: rep.Err.Type})
		c.span.SetStatus(codes.Error, telemetry.StatusMessage(err))
	}
	c.span.SetAttributes(attrs...)
}

// finalReport describes a call whose error did not come out of retrace's
// retry loop: a policy before the loop refused it, or a failsafe-go retry
// policy gave up.
func (l *layer[Req, Resp]) finalReport(ctx context.Context, c *call[Req, Resp], err error) *policies.Report {
	n := max(c.attempts, 1)
	if err == nil {
		o := policies.OutcomeSuccess
		if n > 1 {
			o = policies.OutcomeSuccessAfterRetry
		}
		return &policies.Report{Attempts: n, Outcome: o}
	}
	var fe *policies.FailedError
	if errors.As(err, &fe) && fe.Layer == "" {
		return &policies.Report{Attempts: fe.Attempts, Outcome: fe.Outcome, Diagnosis: fe.Diagnosis, Err: fe}
	}
	cls := c.classify(ctx, err)
	var d policies.Decision
	var oe policies.OutcomeError
	switch _, rejected := err.(*policies.RejectedError); {
	case errors.As(err, &oe):
		d.Outcome = oe.Outcome()
	case ctx.Err() != nil:
		d.Outcome = policies.OutcomeCanceled
	case rejected:
		d.Outcome = policies.OutcomeRejected
	case errors.Is(err, budget.ErrExceeded):
		d.Outcome = policies.OutcomeBudgetExhausted
	case cls.Class == policies.Transient, cls.Class == policies.Unknown && l.foreignRetry:
		d.Outcome = policies.OutcomeFailedExhausted
	default:
		d.Outcome = policies.OutcomeFailedPermanent
	}
	diag := policies.Diagnose(d.Outcome, n, "", cls, err)
	return &policies.Report{Attempts: n, Outcome: d.Outcome, Diagnosis: diag, Err: &policies.FailedError{
		Outcome: d.Outcome, Attempts: n, Class: cls.Class, Type: cls.Type, Diagnosis: diag, Err: err,
	}}
}

// classify classifies err once per error value, as the layer's retry
// policy sees it.
func (c *call[Req, Resp]) classify(ctx context.Context, err error) policies.Classification {
	if err == c.lastErr && err != nil {
		return c.lastCls
	}
	c.lastErr, c.lastCls = err, policies.ClassifyContext(ctx, c.l.classifier, err)
	return c.lastCls
}

// The retry loop: call implements policies.Attempter.

func (l *layer[Req, Resp]) loopStep(inner step[Req, Resp]) step[Req, Resp] {
	return func(ctx context.Context, c *call[Req, Resp], _ Req) (Resp, error) {
		c.inner = inner
		resp, rep := policies.Do[Resp](ctx, l.retrier, l.clock, c)
		c.report = &rep
		if rep.Err != nil {
			return resp, rep.Err
		}
		return resp, nil
	}
}

func (c *call[Req, Resp]) Attempt(ctx context.Context, n int, delay time.Duration) (Resp, error) {
	c.attempts = n
	c.frame.attempt, c.frame.delay = n, delay
	if c.recording && c.l.retrier.MaxAttempts() > 1 {
		ctx, c.aspan = c.l.tracerNow().Start(ctx, c.l.attemptName)
	}
	return c.inner(ctx, c, c.req)
}

// endAttempt ends an attempt span with all its attributes in one call: its
// number, the backoff it waited, and how it failed, if it did.
func endAttempt(span trace.Span, n int, delay time.Duration, cls policies.Classification, err error) {
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, telemetry.Attempt.Int(n))
	if delay > 0 {
		attrs = append(attrs, telemetry.RetryDelayMs.Int64(delay.Milliseconds()))
	}
	if err != nil {
		attrs = telemetry.AppendFailure(attrs, cls)
		span.SetStatus(codes.Error, telemetry.StatusMessage(err))
	}
	span.SetAttributes(attrs...)
	span.End()
}

// Refusal implements policies.Gate: a breaker inside the retry loop that is
// open, and still cooling down, would refuse the next attempt.
func (c *call[Req, Resp]) Refusal() *policies.RejectedError {
	for _, g := range c.l.gates {
		if g.State() == circuitbreaker.OpenState && g.RemainingDelay() > 0 {
			return g.Rejection()
		}
	}
	return nil
}

func (c *call[Req, Resp]) Classify(ctx context.Context, err error) policies.Classification {
	return c.classify(ctx, err)
}

func (c *call[Req, Resp]) Done(n int, err error, cls policies.Classification, _ policies.Decision) {
	if c.aspan == nil {
		return
	}
	endAttempt(c.aspan, n, c.frame.delay, cls, err)
	c.aspan = nil
}
