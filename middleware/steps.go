package middleware

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/telemetry"
)

// leafStep calls the handler. A call beneath which no other layer started
// is a leaf call: it is counted on the outermost layer (retrace.calls),
// unless it reached nothing ([Unsent]) or its layer's calls are not the
// downstream's work ([WithUncounted]): those the span says, and the
// outermost layer counts apart.
func leafStep[Req, Resp any](next Handler[Req, Resp]) step[Req, Resp] {
	return func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error) {
		c.frame.nested.Store(false)
		resp, err := callHandler(ctx, next, req)
		if !c.frame.nested.Load() {
			why := c.l.cfg.uncounted
			if err != nil && isUnsent(err) {
				why = telemetry.UncountedUnsent
			}
			switch {
			case why != "":
				c.frame.root.uncounted.Add(1)
				if c.recording {
					c.current().SetAttributes(telemetry.Uncounted.String(why))
				}
			case c.recording || c.frame.root.span == nil:
				c.frame.root.calls.Add(1)
			default:
				// The trace is recorded but this call's span is not (its
				// layer's tracer provider samples nothing): retrace.calls
				// counts what the trace shows, and the root says how many
				// more calls were made.
				c.frame.root.untraced.Add(1)
			}
		}
		return resp, err
	}
}

// Unsent marks err, a handler's error, as that of a call that reached
// nothing: the request was never written (its session had ended, its
// connection was refused). The layer's span says so (retrace.uncounted =
// unsent) and retrace.calls does not count it, so that the count stays the
// requests the downstream received; a circuit breaker of the layer does
// not count it either. Classification sees through it: err keeps its class.
// A nil err stays nil.
func Unsent(err error) error {
	if err == nil || isUnsent(err) {
		return err
	}
	return &unsentError{err: err}
}

// unsentError is an error [Unsent] marked.
type unsentError struct{ err error }

func (e *unsentError) Error() string { return e.err.Error() }
func (e *unsentError) Unwrap() error { return e.err }

func isUnsent(err error) bool {
	_, ok := errors.AsType[*unsentError](err)
	return ok
}

// callHandler is the one place retrace recovers a handler's panics: a
// panicking handler becomes a Programming error, and the permits held
// around it are released.
func callHandler[Req, Resp any](ctx context.Context, next Handler[Req, Resp], req Req) (resp Resp, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = policies.Recovered(v, debug.Stack())
		}
	}()
	return next(ctx, req)
}

// policySpan starts a span for a policy that acts, or returns ctx and nil.
func (c *call[Req, Resp]) policySpan(ctx context.Context, policy string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !c.recording {
		return ctx, nil
	}
	return c.tracer.Start(ctx, policy, trace.WithAttributes(
		append([]attribute.KeyValue{telemetry.Policy.String(policy), telemetry.Layer.String(c.l.name)}, attrs...)...))
}

// endPolicySpan ends a policy span, recording err if there is one.
func (c *call[Req, Resp]) endPolicySpan(ctx context.Context, span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		known := c.known()
		span.SetAttributes(appendFailure(known, nil, c.classify(ctx, err))...)
		span.SetStatus(codes.Error, c.failures().status.of(known, err))
	}
	span.End()
}

// reject ends an attempt that the layer's own breaker or bulkhead refused.
func (c *call[Req, Resp]) reject(ctx context.Context, policy string, rej error, attrs ...attribute.KeyValue) (Resp, error) {
	c.rejected = true
	_, span := c.policySpan(ctx, policy, attrs...)
	c.endPolicySpan(ctx, span, rej)
	var zero Resp
	return zero, rej
}

// breakerStep drives one of retrace's breakers: a permit per attempt, the
// end of the attempt recorded by its class, as the breaker's own classifier,
// else the layer's, else the defaults sees it, on the breaker's clock, else
// the layer's.
func (l *layer[Req, Resp]) breakerStep(h breakerPolicy, next step[Req, Resp]) step[Req, Resp] {
	b := h.Engine()
	l.meter.watch(b, l.name)
	return func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error) {
		clk := l.clock()
		permit, ok := b.Acquire(clk)
		if !ok {
			c.noteState(ctx, c.current(), permit.State())
			if c.recording {
				c.current().SetAttributes(telemetry.CircuitState.String(telemetry.CircuitOpen))
			}
			return c.reject(ctx, telemetry.PolicyCircuitBreaker, h.Rejection(clk), telemetry.CircuitState.String(telemetry.CircuitOpen))
		}
		// A closed breaker that lets a call through did nothing worth a span
		// or an attribute; a half-open one is probing, and says so.
		var span trace.Span
		if l.cfg.policySpans || permit.Probe() {
			state := telemetry.CircuitClosed
			if permit.Probe() {
				state = telemetry.CircuitHalfOpen
			}
			ctx, span = c.policySpan(ctx, telemetry.PolicyCircuitBreaker, telemetry.CircuitState.String(state))
		}
		c.noteState(ctx, spanOr(span, c.current()), permit.State())
		resp, err := next(ctx, c, req)
		count := state.Success
		switch {
		case err != nil && isUnsent(err):
			count = state.Ignore // it reached nothing: the downstream did not fail it
		case err != nil:
			count = engine.CountOf(string(c.classifyFor(ctx, h, err).Class))
		}
		if serr := b.Record(permit, count, clk); serr != nil {
			c.noteState(ctx, spanOr(span, c.current()), state.Use{Policy: state.PolicyBreaker, Degraded: serr})
		}
		c.endPolicySpan(ctx, span, err)
		return resp, err
	}
}

// foreignBreakerStep drives a failsafe-go circuit breaker through its permit
// API.
func (l *layer[Req, Resp]) foreignBreakerStep(cb circuitbreaker.CircuitBreaker[Resp], next step[Req, Resp]) step[Req, Resp] {
	return func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error) {
		state := cb.State()
		if !cb.TryAcquirePermit() {
			rej := &policies.Error{Class: policies.Transient, Type: "circuit_open", Reason: "circuit_breaker rejected the call",
				RetryAfter: cb.RemainingDelay(), Err: circuitbreaker.ErrOpen}
			return c.reject(ctx, telemetry.PolicyCircuitBreaker, rej, telemetry.CircuitState.String(telemetry.CircuitOpen))
		}
		var span trace.Span
		if l.cfg.policySpans || state != circuitbreaker.ClosedState {
			ctx, span = c.policySpan(ctx, telemetry.PolicyCircuitBreaker, telemetry.CircuitState.String(circuitState(state)))
		}
		resp, err := next(ctx, c, req)
		if err == nil {
			cb.RecordSuccess()
		} else {
			cb.RecordError(err)
		}
		c.endPolicySpan(ctx, span, err)
		return resp, err
	}
}

// bulkheadStep takes a slot per attempt, waiting on the layer's clock.
func (l *layer[Req, Resp]) bulkheadStep(h bulkheadPolicy, next step[Req, Resp]) step[Req, Resp] {
	b := h.Engine()
	return func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error) {
		var span trace.Span
		if !b.TryAcquire() {
			// The call waits for a slot, or is refused: the bulkhead acts.
			ctx, span = c.policySpan(ctx, telemetry.PolicyBulkhead)
			if err := h.Acquire(ctx, l.clock()); err != nil {
				if e, full := err.(*policies.Error); full && errors.Is(e, bulkhead.ErrFull) {
					c.rejected = true
				}
				c.endPolicySpan(ctx, span, err)
				var zero Resp
				return zero, err
			}
		} else if l.cfg.policySpans {
			ctx, span = c.policySpan(ctx, telemetry.PolicyBulkhead)
		}
		resp, err := next(ctx, c, req)
		b.Release()
		c.endPolicySpan(ctx, span, err)
		return resp, err
	}
}

// timeoutStep bounds an attempt on the timeout's clock, else the layer's.
func (l *layer[Req, Resp]) timeoutStep(h timeoutPolicy, next step[Req, Resp]) step[Req, Resp] {
	limit := h.Limit()
	clk := engine.Or(h.Clock(), l.clock())
	cause := h.Expired(nil)
	return func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error) {
		var span trace.Span
		if l.cfg.policySpans {
			ctx, span = c.policySpan(ctx, telemetry.PolicyTimeout)
		}
		tctx, cancel := clock.WithTimeout(ctx, clk, limit, cause)
		resp, err := next(tctx, c, req)
		fired := err != nil && context.Cause(tctx) == error(cause) && ctx.Err() == nil
		if err != nil || !keepUntilRead(any(resp), cancel) {
			cancel()
		}
		if fired {
			err = h.Expired(err)
			if span == nil {
				_, span = c.policySpan(ctx, telemetry.PolicyTimeout)
			}
		}
		c.endPolicySpan(ctx, span, err)
		return resp, err
	}
}

// keepUntilRead hands cancel, the end of an attempt's context, to resp's
// body when resp is an HTTP answer with one: the body is read from the
// attempt's connection, so the attempt lasts until the body has been read to
// its end or closed (and its timeout still bounds it), not only until the
// headers came.
func keepUntilRead(resp any, cancel context.CancelFunc) bool {
	r, ok := resp.(*http.Response)
	if !ok || r == nil || r.Body == nil || r.Body == http.NoBody {
		return false
	}
	r.Body = &cancelAtEnd{ReadCloser: r.Body, cancel: cancel}
	return true
}

// cancelAtEnd is a body that ends its attempt's context when it is read to
// its end, fails, or is closed.
type cancelAtEnd struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelAtEnd) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.cancel()
	}
	return n, err
}

func (b *cancelAtEnd) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// foreignStep runs policies retrace does not drive through one failsafe-go
// executor. A failsafe-go retry policy among them gets attempt spans, and
// its retries draw from the task budget: when the budget refuses one, the
// execution is canceled before the retry reaches the handler.
func (l *layer[Req, Resp]) foreignStep(ps []policy[Resp], next step[Req, Resp]) step[Req, Resp] {
	fps := make([]failsafe.Policy[Resp], len(ps))
	retries := false
	for i, p := range ps {
		fps[i] = p.p
		retries = retries || p.failsafeRetry
	}
	exec := failsafe.With(fps...)
	return func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error) {
		if !retries {
			return exec.WithContext(ctx).GetWithExecution(func(e failsafe.Execution[Resp]) (Resp, error) {
				return next(e.Context(), c, req)
			})
		}
		ectx, cancel := context.WithCancel(ctx)
		defer cancel()
		var last error
		resp, err := exec.WithContext(ectx).GetWithExecution(func(e failsafe.Execution[Resp]) (Resp, error) {
			n := e.Attempts()
			if n > 1 {
				if b := engine.BudgetFrom(ctx); b != nil && !b.TryDraw() {
					c.budgetOut = true
					c.meter.refused(ctx)
					cancel()
					var zero Resp
					return zero, policies.ErrBudgetExhausted
				}
			}
			resp, err := c.foreignAttempt(e.Context(), n, next, req)
			last = err
			return resp, err
		})
		if c.budgetOut && last != nil {
			return resp, last
		}
		return resp, err
	}
}

// foreignAttempt is one attempt of a failsafe-go retry policy.
func (c *call[Req, Resp]) foreignAttempt(ctx context.Context, n int, next step[Req, Resp], req Req) (resp Resp, err error) {
	c.attempts = n
	var delay time.Duration
	if f := c.fail; n > 1 && f != nil && !f.lastEnd.IsZero() {
		// A retry follows a failed attempt, whose end the call kept.
		delay = engine.Or(c.l.clock()).Now().Sub(f.lastEnd)
	}
	c.frame.startAttempt(n, delay)
	if n > 1 {
		c.meter.retried(ctx, delay)
	}
	var span trace.Span
	if c.recording {
		ctx, span = c.l.role.attempt(ctx, c, n)
		c.narrated = c.narrated || span != nil
		prev := c.aspan
		c.aspan = span
		defer func() { c.aspan = prev }()
	}
	resp, err = next(ctx, c, req)
	var cls policies.Classification
	if err != nil {
		c.failures().lastEnd = engine.Or(c.l.clock()).Now()
		cls = c.classify(ctx, err)
	}
	c.attemptEnded(n, delay, err, cls)
	if span != nil {
		c.endAttempt(span, n, delay, cls, err)
	}
	return resp, err
}

// The attempts of the retry loop: call implements engine.Attempter and
// engine.Gate, and engine.Do calls back here for each attempt, each
// failure and each decision.

func (c *call[Req, Resp]) Attempt(ctx context.Context, n int, delay time.Duration) (Resp, error) {
	c.attempts = n
	c.rejected = false
	c.frame.startAttempt(n, delay)
	if n > 1 {
		c.meter.retried(c.fctx.Context, delay)
	}
	if c.recording && c.l.retry.MaxAttempts > 1 {
		ctx, c.aspan = c.l.role.attempt(ctx, c, n)
		c.narrated = c.narrated || c.aspan != nil
	}
	return c.inner(ctx, c, c.req)
}

func (c *call[Req, Resp]) Judge(ctx context.Context, err error) engine.Failure {
	c.classify(ctx, err)
	f := c.fail.last.fail
	if c.rejected {
		f.Rejected, f.Held = true, false
	}
	return f
}

// Refusal implements engine.Gate: the role may refuse the next attempt (a
// request whose body cannot be sent again), and so would a breaker inside
// the retry loop that is open and still cooling down. Refused before the
// retry starts, no attempt span stands for an attempt never made.
func (c *call[Req, Resp]) Refusal() error {
	if err := c.l.role.refusal(c.req); err != nil {
		return err
	}
	for _, g := range c.l.gates {
		if b := g.Engine(); b.State() == circuitbreaker.OpenState && b.Remaining(c.l.clock()) > 0 {
			return g.Rejection(c.l.clock())
		}
	}
	return nil
}

func (c *call[Req, Resp]) Done(n int, err error, d engine.Decision) {
	c.noteState(c.fctx.Context, c.current(), d.State)
	if d.Outcome == string(policies.OutcomeBudgetExhausted) {
		c.meter.refused(c.fctx.Context)
	}
	var cls policies.Classification
	if err != nil {
		cls = c.lastCls()
	}
	c.attemptEnded(n, c.frame.delay, err, cls)
	if c.aspan == nil {
		return
	}
	c.endAttempt(c.aspan, n, c.frame.delay, cls, err)
	c.aspan = nil
}

// attemptEnded tells the layer's WithOnAttempt observer, if it has one.
func (c *call[Req, Resp]) attemptEnded(n int, delay time.Duration, err error, cls policies.Classification) {
	if f := c.l.cfg.onAttempt; f != nil {
		f(c.fctx.Context, AttemptEnd{Attempt: Attempt{Layer: c.l.name, N: n, MaxAttempts: c.l.maxAttempts, Delay: delay}, Err: err, Class: cls})
	}
}

// endAttempt ends an attempt span with all its attributes in one call: its
// number, the backoff it waited, and how it failed, if it did. An attempt
// that waited no backoff and succeeded sets the layer's attributes made for
// it beforehand (okAttrs).
func (c *call[Req, Resp]) endAttempt(span trace.Span, n int, delay time.Duration, cls policies.Classification, err error) {
	if ok := c.l.ok.attempts; err == nil && delay <= 0 && n >= 1 && n <= len(ok) {
		span.SetAttributes(ok[n-1]...)
		span.End()
		return
	}
	buf := c.l.attrBuf()
	defer c.l.attrs.Put(buf)
	attrs := attemptAttrs((*buf)[:0], n, delay)
	if err != nil {
		known := c.known()
		attrs = appendFailure(known, attrs, cls)
		span.SetStatus(codes.Error, c.failures().status.of(known, err))
	}
	span.SetAttributes(attrs...)
	span.End()
	*buf = attrs
}

// attemptAttrs appends an attempt span's attributes but its failure's: its
// number n, and the backoff it waited before, if any.
func attemptAttrs(attrs []attribute.KeyValue, n int, delay time.Duration) []attribute.KeyValue {
	attrs = append(attrs, telemetry.Attempt.Int(n))
	if delay > 0 {
		attrs = append(attrs, telemetry.RetryDelayMs.Int64(delay.Milliseconds()))
	}
	return attrs
}
