package engine

import "context"

// stateCtx is the context of a step on a shared state made where the caller
// hands none: the store's own timeout bounds it.
func stateCtx() context.Context { return context.Background() }
