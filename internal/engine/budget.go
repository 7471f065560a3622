package engine

import (
	"context"

	"github.com/retrace-go/retrace/policies/state"
)

// Budget is a count of retries shared by every retrying layer beneath the
// context that carries it: each retry draws one.
type Budget interface {
	// TryDraw takes one retry and reports whether there was one.
	TryDraw() bool
	// Limit is the number of retries the budget allows.
	Limit() int
}

type budgetKey struct{}

// WithBudget returns a context whose retrying layers draw from b.
func WithBudget(ctx context.Context, b Budget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

// BudgetFrom returns the context's budget, or nil.
func BudgetFrom(ctx context.Context) Budget {
	b, _ := ctx.Value(budgetKey{}).(Budget)
	return b
}

// SharedBudget is a Budget whose count may live in a shared State: a draw
// says which state decided it.
type SharedBudget interface {
	Budget
	Draw(ctx context.Context) (bool, state.Use)
}

// DrawFrom draws one retry from b, saying where the draw was decided.
func DrawFrom(ctx context.Context, b Budget) (bool, state.Use) {
	if sb, ok := b.(SharedBudget); ok {
		return sb.Draw(ctx)
	}
	return b.TryDraw(), state.Use{}
}

// SharedRate is a RateBudget whose counts may live in a shared State: asking
// for a retry says which state decided it.
type SharedRate interface {
	RateBudget
	AcquireFrom(ctx context.Context) (bool, state.Use)
}

// acquireRate asks r for a retry, saying where it was decided.
func acquireRate(ctx context.Context, r RateBudget) (bool, state.Use) {
	if sr, ok := r.(SharedRate); ok {
		return sr.AcquireFrom(ctx)
	}
	return r.TryAcquirePermit(), state.Use{}
}
