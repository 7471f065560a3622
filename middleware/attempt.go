package middleware

import (
	"context"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// This file holds the retry loop's callbacks (call implements
// engine.Attempter and engine.Gate) and how an attempt's span ends.

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

// Pending implements engine.PendingUser: the breaker steps of the call's
// attempts send the loop's pending steps with their own. A call runs one
// retry loop, so its own struct holds the loop's Pending.
func (c *call[Req, Resp]) Pending() *engine.Pending {
	c.pend = &c.pendLoop
	return c.pend
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
	if d.Outcome == string(telemetry.OutcomeBudgetExhausted) {
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
