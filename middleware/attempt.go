package middleware

import (
	"context"
	"sync/atomic"
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
// that waited no backoff sets the layer's attributes made for it
// beforehand: okAttrs' when it succeeded, failedAttrs' when it failed in
// one of the ways the layer keeps them for.
func (c *call[Req, Resp]) endAttempt(span trace.Span, n int, delay time.Duration, cls policies.Classification, err error) {
	if ok := c.l.reuse.ok.attempts; delay <= 0 && n >= 1 && n <= len(ok) {
		if err == nil {
			span.SetAttributes(ok[n-1]...)
			span.End()
			return
		}
		if known := c.known(); len(known) == 0 {
			if attrs := c.l.reuse.failed.of(n, len(ok), cls); attrs != nil {
				span.SetAttributes(attrs...)
				span.SetStatus(codes.Error, c.statusOf(known, err))
				span.End()
				return
			}
		}
	}
	buf := c.l.attrBuf()
	defer c.l.reuse.attrs.Put(buf)
	attrs := attemptAttrs((*buf)[:0], n, delay)
	if err != nil {
		known := c.known()
		attrs = appendFailure(known, attrs, cls)
		span.SetStatus(codes.Error, c.statusOf(known, err))
	}
	span.SetAttributes(attrs...)
	span.End()
	*buf = attrs
}

// failedAttrs are the attributes of a layer's attempt spans that failed
// with one classification, without a backoff before them, by attempt
// number: made once, as okAttrs are for a success, so that such an attempt
// builds none. A layer fails in a few ways, again and again (a provider
// that is down answers 503 to every call), and what the attributes say of
// a failure is low in cardinality by design: its class, error.type and the
// rule that decided. A Retry-After hint is not: a failure that carries one
// builds its attributes, as one beside a known secret does, whose type or
// reason may echo it.
type failedAttrs struct {
	class       policies.Class
	typ, reason string
	attempts    [][]attribute.KeyValue // attempts[n-1]: attempt n's
}

// failedKinds is how many classifications a layer makes failedAttrs for:
// the first it fails with. A failure of any other builds its attributes
// when it ends, so that a layer's memory stays bounded whatever its
// errors say.
const failedKinds = 8

// failedMemo holds a layer's failedAttrs, filled in the order its
// classifications first fail an attempt; a slot, once filled, never
// changes, so that a call reads it without a lock.
type failedMemo [failedKinds]atomic.Pointer[failedAttrs]

// of returns the attributes of attempt n that failed with cls, of a layer
// whose attempt spans okAttrs numbers up to max; made now when cls is new
// and a slot is free; nil when the layer keeps none for cls.
func (m *failedMemo) of(n, max int, cls policies.Classification) []attribute.KeyValue {
	if cls.RetryAfter > 0 {
		return nil
	}
	for i := range m {
		f := m[i].Load()
		if f == nil {
			f = newFailedAttrs(cls, max)
			if !m[i].CompareAndSwap(nil, f) {
				// Another call filled the slot first: it may have been
				// with cls.
				if f = m[i].Load(); !f.is(cls) {
					continue
				}
			}
			return f.attempts[n-1]
		}
		if f.is(cls) {
			return f.attempts[n-1]
		}
	}
	return nil
}

func (f *failedAttrs) is(cls policies.Classification) bool {
	return f.class == cls.Class && f.typ == cls.Type && f.reason == cls.Reason
}

// newFailedAttrs makes the attributes of attempts 1 to max failing with
// cls (no Retry-After), in one array, each attempt's clipped so that no
// append reaches the next's.
func newFailedAttrs(cls policies.Classification, max int) *failedAttrs {
	f := &failedAttrs{class: cls.Class, typ: cls.Type, reason: cls.Reason, attempts: make([][]attribute.KeyValue, max)}
	all := make([]attribute.KeyValue, 0, max*(1+failureAttrs))
	for n := 1; n <= max; n++ {
		from := len(all)
		all = appendFailure(nil, attemptAttrs(all, n, 0), cls)
		f.attempts[n-1] = all[from:len(all):len(all)]
	}
	return f
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
