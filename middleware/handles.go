package middleware

import (
	"context"
	"time"

	"github.com/failsafe-go/failsafe-go"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
)

// retrace's own policies are recognised by what their executors
// (failsafe.Policy.ToExecutor) offer: the engine behind them and the judge
// that classifies for them. These methods are the policies' only way in, so
// none of it is public API.

// judge classifies errors and words failures for a layer.
type judge interface {
	Classifier() *policies.Classifier
	Judge(ctx context.Context, fallback *policies.Classifier, err error) (policies.Classification, engine.Failure)
	Judged(ctx context.Context, cls policies.Classification, err error) (policies.Classification, engine.Failure)
	Fail(ctx context.Context, layer string, rep engine.Report, cls policies.Classification) error
}

type retryPolicy interface {
	judge
	Engine() *engine.Retry
}

type breakerPolicy interface {
	judge
	Engine() *engine.Breaker
	Rejection(clk clock.Clock) *policies.RejectedError
}

type bulkheadPolicy interface {
	Engine() *engine.Bulkhead
	Acquire(ctx context.Context, clk clock.Clock) error
}

type timeoutPolicy interface {
	Engine() (time.Duration, clock.Clock)
}

// executorOf returns what p's executor offers of H, if it is one of
// retrace's policies.
func executorOf[H any, R any](p failsafe.Policy[R]) (H, bool) {
	var zero R
	h, ok := p.ToExecutor(zero).(H)
	return h, ok
}
