package retracetemporal

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/telemetry"
)

// LayerName is the retry layer Temporal's activity attempts are, in the
// nested-retry event ("temporal(3) × session(4)") and as each attempt's
// root layer (retrace.layer).
const LayerName = "temporal"

// attemptsHeader carries an activity's MaximumAttempts from the workflow
// that schedules it to the worker that runs it: the worker's activity.Info
// does not always have the retry policy (the SDK's test environment leaves
// it nil).
const attemptsHeader = "retrace-max-attempts"

// NewInterceptor returns a worker interceptor that makes each activity
// attempt a retrace layer call and hands its error to Temporal as
// cfg.ApplicationError reads it. Add it to the worker's
// Options.Interceptors, after Temporal's tracing interceptor if there is
// one (its RunActivity span then holds retrace's); the workflows and
// activities stay as they are.
//
// Each attempt is the root of its own retrace trace tree (a layer named
// [LayerName], temporal.activity.attempt the attempt's number,
// retrace.calls what it sent), and the activity's retry policy is a retry layer around the
// layers the activity calls: retrace.calls.worst_case is its MaximumAttempts
// times what one attempt may cost, and the nested-retry event names it. A
// policy without a limit (Temporal's default) leaves the worst case unknown
// and the event says "temporal(?)".
func NewInterceptor(cfg Config) interceptor.WorkerInterceptor {
	opts := append([]middleware.Option{}, cfg.Options...)
	layer := middleware.Layer[*interceptor.ExecuteActivityInput, any](LayerName, middleware.Spec[any]{}, opts...)
	if cfg.TaskBudget > 0 && cfg.State == nil {
		cfg.State = state.NewMemory()
	}
	return &workerInterceptor{cfg: cfg, layer: layer}
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	cfg   Config
	layer middleware.Middleware[*interceptor.ExecuteActivityInput, any]
}

func (w *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityInbound{w: w}
	a.Next = next
	return a
}

func (w *workerInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &workflowInbound{}
	i.Next = next
	return i
}

type workflowInbound struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (i *workflowInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	o := &workflowOutbound{}
	o.Next = outbound
	return i.Next.Init(o)
}

type workflowOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
}

// ExecuteActivity writes the activity's MaximumAttempts (0: no limit) in
// its header, for the worker that runs it.
func (o *workflowOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	attempts := int32(0)
	if rp := workflow.GetActivityOptions(ctx).RetryPolicy; rp != nil {
		attempts = rp.MaximumAttempts
	}
	if h := interceptor.WorkflowHeader(ctx); h != nil {
		if p, err := converter.GetDefaultDataConverter().ToPayload(attempts); err == nil {
			h[attemptsHeader] = p
		}
	}
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	w *workerInterceptor
}

// ExecuteActivity runs the activity's attempt as a retrace layer call and
// reads its error. An error after the activity's context ended (its
// timeout, its cancellation) is Temporal's own to read, and is returned as
// it is.
func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	info := activity.GetInfo(ctx)
	attempts := maxAttempts(ctx, info)
	if n := a.w.cfg.TaskBudget; n > 0 {
		ctx = policies.WithSharedTaskBudget(ctx, a.w.cfg.State, "temporal:"+info.WorkflowExecution.ID, n)
		if info.Attempt > 1 {
			// Temporal's retry is a retry of the task's like any other.
			if ok, _ := policies.TaskBudgetFrom(ctx).Draw(ctx); !ok {
				return nil, a.w.cfg.ApplicationError(&policies.Error{Class: policies.Transient, Type: "budget_exhausted",
					Layer: LayerName, Outcome: telemetry.OutcomeBudgetExhausted, Attempts: int(info.Attempt) - 1,
					Message: fmt.Sprintf("the workflow's retry budget (%d) is spent: attempt %d of %s is not made", n, info.Attempt, info.ActivityType.Name)})
			}
		}
	}
	ctx = middleware.WithCallAttributes(ctx,
		keyActivityAttempt.Int(int(info.Attempt)),
		keyActivityType.String(info.ActivityType.Name),
		keyWorkflowID.String(info.WorkflowExecution.ID),
		keyActivityID.String(info.ActivityID),
	)
	call := a.w.layer(func(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
		return a.Next.ExecuteActivity(middleware.WithinRetryAttempt(ctx, LayerName, attempts), in)
	})
	res, err := call(ctx, in)
	if err == nil || ctx.Err() != nil {
		return res, err
	}
	return res, a.w.cfg.ApplicationError(err)
}

// maxAttempts is the activity's MaximumAttempts, as its workflow's
// interceptor wrote it, else as the worker's info has it; 0 when it has no
// limit or none is known.
func maxAttempts(ctx context.Context, info activity.Info) int {
	if h := interceptor.Header(ctx); h != nil {
		if p, ok := h[attemptsHeader]; ok {
			var n int32
			if converter.GetDefaultDataConverter().FromPayload(p, &n) == nil {
				return int(n)
			}
		}
	}
	if info.RetryPolicy != nil {
		return int(info.RetryPolicy.MaximumAttempts)
	}
	return 0
}
