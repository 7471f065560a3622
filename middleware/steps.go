package middleware

import (
	"context"
	"errors"
	"runtime/debug"

	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/failure"
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
		resp, err := callHandler(ctx, c, next, req)
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
func callHandler[Req, Resp any](ctx context.Context, c *call[Req, Resp], next Handler[Req, Resp], req Req) (resp Resp, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = failure.Recovered(v, debug.Stack())
			c.mark(err)
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
		span.SetStatus(codes.Error, c.statusOf(known, err))
	}
	span.End()
}

// reject ends an attempt that the layer's own breaker or bulkhead refused.
func (c *call[Req, Resp]) reject(ctx context.Context, policy string, rej error, attrs ...attribute.KeyValue) (Resp, error) {
	c.rejected = true
	c.mark(rej)
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
		permit, ok := b.AcquireWith(c.pend, clk)
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
		if serr := b.RecordWith(c.pend, permit, count, clk); serr != nil {
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
					c.mark(e) // made by this refusal; a context's end is not
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
		if err != nil || !l.role.keep(resp, cancel) {
			cancel()
		}
		if fired {
			err = h.Expired(err)
			c.mark(err)
			if span == nil {
				_, span = c.policySpan(ctx, telemetry.PolicyTimeout)
			}
		}
		c.endPolicySpan(ctx, span, err)
		return resp, err
	}
}
