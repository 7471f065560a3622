package middleware

import (
	"context"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
	"go.opentelemetry.io/otel/trace"
)

// This file runs the policies retrace does not drive itself through
// failsafe-go's own executor.

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
					return zero, budget.ErrExceeded
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
