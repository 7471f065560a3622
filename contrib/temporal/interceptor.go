package retracetemporal

import (
	"context"

	"go.temporal.io/sdk/interceptor"
)

// NewInterceptor returns a worker interceptor that hands every activity's
// error to Temporal as cfg.ApplicationError reads it. Add it to the
// worker's Options.Interceptors; the workflows and activities stay as
// they are.
func NewInterceptor(cfg Config) interceptor.WorkerInterceptor {
	return &workerInterceptor{cfg: cfg}
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	cfg Config
}

func (w *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityInbound{cfg: w.cfg}
	a.Next = next
	return a
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	cfg Config
}

// ExecuteActivity runs the activity and reads its error. An error after
// the activity's context ended (its timeout, its cancellation) is
// Temporal's own to read, and is returned as it is.
func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := a.Next.ExecuteActivity(ctx, in)
	if err == nil || ctx.Err() != nil {
		return res, err
	}
	return res, a.cfg.ApplicationError(err)
}
