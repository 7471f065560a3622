package middleware

import (
	"context"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
)

// retrace's own policies are recognised by what their executors
// (failsafe.Policy.ToExecutor) offer: the engine behind them and the judge
// that classifies for them. These methods are the policies' only way in, so
// none of it is public API. A layer recognises each of its policies once,
// when it is built (recognize), and keeps what it found (policy).

// judge classifies errors and words failures for a layer.
type judge interface {
	Classifier() *policies.Classifier
	Judge(ctx context.Context, fallback *policies.Classifier, err error) (policies.Classification, engine.Failure)
	Judged(ctx context.Context, cls policies.Classification, err error) (policies.Classification, engine.Failure)
	Fail(ctx context.Context, layer string, rep engine.Report, cls policies.Classification, span trace.SpanContext) error
	Named(err error, span trace.SpanContext) error
	Mark(e *policies.Error, span trace.SpanContext)
}

type retryPolicy interface {
	judge
	Engine() *engine.Retry
}

type breakerPolicy interface {
	judge
	Engine() *engine.Breaker
	Rejection(clk clock.Clock) *policies.Error
}

type bulkheadPolicy interface {
	Engine() *engine.Bulkhead
	Acquire(ctx context.Context, clk clock.Clock) error
}

// timeoutPolicy offers its limit and its own clock (nil: the layer's).
type timeoutPolicy interface {
	Limit() time.Duration
	Clock() clock.Clock
	Expired(err error) error
}

// policy is one of a layer's policies as the layer found it: at most one
// of retry, breaker, bulkhead, timeout (retrace's own, which the layer
// drives) and foreignBreaker (failsafe-go's, driven through its permit
// API) is set; with none, failsafe-go's executor runs it (foreignStep).
type policy[R any] struct {
	p              failsafe.Policy[R]
	retry          retryPolicy
	breaker        breakerPolicy
	bulkhead       bulkheadPolicy
	timeout        timeoutPolicy
	foreignBreaker circuitbreaker.CircuitBreaker[R]
	failsafeRetry  bool // failsafe-go's retry policy, whose limit retrace cannot read
}

// recognize finds out what p is, once.
func recognize[R any](p failsafe.Policy[R]) policy[R] {
	d := policy[R]{p: p}
	var zero R
	switch e := p.ToExecutor(zero).(type) {
	case retryPolicy:
		d.retry = e
	case breakerPolicy:
		d.breaker = e
	case bulkheadPolicy:
		d.bulkhead = e
	case timeoutPolicy:
		d.timeout = e
	default:
		if cb, ok := p.(circuitbreaker.CircuitBreaker[R]); ok {
			d.foreignBreaker = cb
		} else {
			d.failsafeRetry = isFailsafeRetry(p)
		}
	}
	return d
}

// driven reports whether the layer drives the policy itself.
func (d policy[R]) driven() bool {
	return d.retry != nil || d.breaker != nil || d.bulkhead != nil || d.timeout != nil || d.foreignBreaker != nil
}

// isFailsafeRetry reports whether p is failsafe-go's retry policy, known by
// the builder methods its type carries (retrypolicy.RetryPolicy itself is
// no more than failsafe.Policy, so nothing else tells it apart).
func isFailsafeRetry[R any](p failsafe.Policy[R]) bool {
	_, ok := p.(interface {
		ReturnLastFailure() retrypolicy.Builder[R]
	})
	return ok
}
