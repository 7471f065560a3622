package policies

import (
	"context"
	"sync/atomic"

	"github.com/retrace-go/retrace/internal/engine"
)

// TaskBudget is one retry count shared by every retrying layer and tool of a
// task. Each retry, at any depth, draws one; when none are left, retries stop
// with outcome budget_exhausted. It is safe for concurrent use.
type TaskBudget struct {
	limit int64
	used  atomic.Int64
	deny  atomic.Int64
}

// WithTaskBudget returns a context whose retrying layers share a budget of
// retries (calls after the first; first calls are never refused). A budget set
// further down replaces this one for the calls beneath it.
func WithTaskBudget(ctx context.Context, retries int) context.Context {
	return engine.WithBudget(ctx, &TaskBudget{limit: int64(max(retries, 0))})
}

// TaskBudgetFrom returns the context's task budget, or nil.
func TaskBudgetFrom(ctx context.Context) *TaskBudget {
	b, _ := engine.BudgetFrom(ctx).(*TaskBudget)
	return b
}

// TryDraw takes one retry from the budget and reports whether there was one.
func (b *TaskBudget) TryDraw() bool {
	for {
		used := b.used.Load()
		if used >= b.limit {
			b.deny.Add(1)
			return false
		}
		if b.used.CompareAndSwap(used, used+1) {
			return true
		}
	}
}

// Limit is the number of retries the task may make.
func (b *TaskBudget) Limit() int { return int(b.limit) }

// Used is the number of retries drawn so far.
func (b *TaskBudget) Used() int { return int(b.used.Load()) }

// Remaining is the number of retries left.
func (b *TaskBudget) Remaining() int { return int(b.limit - b.used.Load()) }

// Denied is the number of retries the budget has refused.
func (b *TaskBudget) Denied() int { return int(b.deny.Load()) }
