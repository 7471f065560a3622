package middleware

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// leafStep calls the handler. A call beneath which no other layer started
// is a leaf call: it is counted on the outermost layer (retrace.calls).
func leafStep[Req, Resp any](next Handler[Req, Resp]) step[Req, Resp] {
	return func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error) {
		c.frame.nested.Store(false)
		resp, err := callHandler(ctx, next, req)
		if !c.frame.nested.Load() {
			c.frame.root.calls.Add(1)
		}
		return resp, err
	}
}

// callHandler is the one place retrace recovers panics: a panicking handler
// becomes a Programming error, and the permits held around it are released.
func callHandler[Req, Resp any](ctx context.Context, next Handler[Req, Resp], req Req) (resp Resp, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &policies.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return next(ctx, req)
}

// policySpan starts a span for a policy that acts, or returns ctx and nil.
func (c *call[Req, Resp]) policySpan(ctx context.Context, policy string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !c.recording {
		return ctx, nil
	}
	return c.l.tracerNow().Start(ctx, policy, trace.WithAttributes(
		append([]attribute.KeyValue{telemetry.Policy.String(policy), telemetry.Layer.String(c.l.name)}, attrs...)...))
}

// endPolicySpan ends a policy span, recording err if there is one.
func (c *call[Req, Resp]) endPolicySpan(ctx context.Context, span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		telemetry.RecordFailure(span, c.classify(ctx, err), err)
	}
	span.End()
}

// breakerCounts is implemented by policies.CircuitBreaker: a permit that
// says in which state it was granted, and a record by class, so that the
// error is classified once.
type breakerCounts interface {
	TryAcquire() (circuitbreaker.State, bool)
	RecordClass(policies.Class)
	Rejection() *policies.RejectedError
	State() circuitbreaker.State
	RemainingDelay() time.Duration
}

func (l *layer[Req, Resp]) breakerStep(cb circuitbreaker.CircuitBreaker[Resp], next step[Req, Resp]) step[Req, Resp] {
	counts, _ := cb.(breakerCounts)
	return func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error) {
		var (
			state circuitbreaker.State
			ok    bool
		)
		if counts != nil {
			state, ok = counts.TryAcquire()
		} else {
			state = cb.State()
			ok = cb.TryAcquirePermit()
		}
		stateAttr := telemetry.CircuitState.String(telemetry.CircuitStateValue(state.String()))
		if !ok {
			var rej *policies.RejectedError
			if counts != nil {
				rej = counts.Rejection()
			} else {
				rej = &policies.RejectedError{Policy: telemetry.PolicyCircuitBreaker, RetryAfter: cb.RemainingDelay(), Err: circuitbreaker.ErrOpen}
			}
			_, span := c.policySpan(ctx, telemetry.PolicyCircuitBreaker, telemetry.CircuitState.String("open"))
			c.endPolicySpan(ctx, span, rej)
			if c.recording {
				c.current().SetAttributes(telemetry.CircuitState.String("open"))
			}
			var zero Resp
			return zero, rej
		}
		// A closed breaker that lets a call through did nothing worth a span
		// or an attribute; one that is half open is probing, and says so.
		var span trace.Span
		if l.cfg.policySpans || state != circuitbreaker.ClosedState {
			ctx, span = c.policySpan(ctx, telemetry.PolicyCircuitBreaker, stateAttr)
		}
		resp, err := next(ctx, c, req)
		switch {
		case err == nil && counts != nil:
			counts.RecordClass("")
		case err == nil:
			cb.RecordSuccess()
		case counts != nil:
			counts.RecordClass(c.classify(ctx, err).Class)
		default:
			cb.RecordError(err)
		}
		c.endPolicySpan(ctx, span, err)
		return resp, err
	}
}

func (l *layer[Req, Resp]) bulkheadStep(b *policies.Bulkhead[Resp], next step[Req, Resp]) step[Req, Resp] {
	return func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error) {
		var span trace.Span
		if !b.TryAcquirePermit() {
			ctx, span = c.policySpan(ctx, telemetry.PolicyBulkhead)
			if err := b.Acquire(ctx); err != nil {
				c.endPolicySpan(ctx, span, err)
				var zero Resp
				return zero, err
			}
		} else if l.cfg.policySpans {
			ctx, span = c.policySpan(ctx, telemetry.PolicyBulkhead)
		}
		resp, err := next(ctx, c, req)
		b.ReleasePermit()
		c.endPolicySpan(ctx, span, err)
		return resp, err
	}
}

func (l *layer[Req, Resp]) timeoutStep(t *policies.Timeout[Resp], next step[Req, Resp]) step[Req, Resp] {
	clk := t.Clock()
	if clk == nil {
		clk = l.clock
	}
	if clk == nil {
		clk = clock.Real()
	}
	limit := t.Limit()
	cause := &policies.TimeoutError{After: limit}
	return func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error) {
		var span trace.Span
		if l.cfg.policySpans {
			ctx, span = c.policySpan(ctx, telemetry.PolicyTimeout)
		}
		tctx, cancel := clock.WithTimeout(ctx, clk, limit, cause)
		resp, err := next(tctx, c, req)
		fired := err != nil && context.Cause(tctx) == error(cause) && ctx.Err() == nil
		cancel()
		if fired {
			err = &policies.TimeoutError{After: limit, Err: err}
			if span == nil {
				_, span = c.policySpan(ctx, telemetry.PolicyTimeout)
			}
		}
		c.endPolicySpan(ctx, span, err)
		return resp, err
	}
}

// foreignStep runs policies retrace does not drive through one failsafe-go
// executor. A failsafe-go retry policy among them gets attempt spans too.
func (l *layer[Req, Resp]) foreignStep(ps []failsafe.Policy[Resp], next step[Req, Resp]) step[Req, Resp] {
	exec := failsafe.With(ps...)
	retries := false
	for _, p := range ps {
		retries = retries || isFailsafe(p, "retrypolicy")
	}
	return func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error) {
		return exec.WithContext(ctx).GetWithExecution(func(e failsafe.Execution[Resp]) (Resp, error) {
			actx := e.Context()
			if !retries {
				return next(actx, c, req)
			}
			return c.foreignAttempt(actx, e.Attempts(), next, req)
		})
	}
}

// foreignAttempt is one attempt of a failsafe-go retry policy.
func (c *call[Req, Resp]) foreignAttempt(ctx context.Context, n int, next step[Req, Resp], req Req) (resp Resp, err error) {
	c.attempts = n
	c.frame.attempt = n
	var span trace.Span
	if c.recording {
		var delay time.Duration
		if n > 1 && !c.lastEnd.IsZero() {
			delay = time.Since(c.lastEnd)
		}
		ctx, span = c.l.tracerNow().Start(ctx, c.l.attemptName)
		prev := c.aspan
		c.aspan = span
		defer func() { c.aspan = prev }()
		defer func() {
			var cls policies.Classification
			if err != nil {
				cls = c.classify(ctx, err)
			}
			endAttempt(span, n, delay, cls, err)
			c.lastEnd = time.Now()
		}()
	}
	resp, err = next(ctx, c, req)
	return resp, err
}
