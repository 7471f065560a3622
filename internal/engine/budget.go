package engine

import "context"

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
