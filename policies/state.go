package policies

import (
	"context"
	"time"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies/state"
)

// State is where circuit breakers and retry budgets keep their counts when
// every worker of a fleet shares them: a breaker of the same name opens,
// probes and closes once for all of them, and a task's or a fleet's retries
// are drawn from one count. Each of its steps is atomic on the store.
//
// contrib/redis implements it on Redis; [NewMemoryState] implements it in
// one process, for workers that are goroutines (tests, demos, simulations).
// A State that fails or is slow never fails a call: the policy decides on
// its own local state, as one without a State does, and the span of that
// decision says so (retrace.state=local and a retrace.state.degraded event).
// Its steps and their plain types are in package [state]; a store written
// elsewhere proves itself with package policies/statetest.
type State = state.State

// MemoryState is a [State] in one process's memory.
type MemoryState struct{ m *engine.MemoryState }

var _ State = (*MemoryState)(nil)

// NewMemoryState returns a [State] in this process's memory, shared by every
// policy given it: a fleet of workers that run as goroutines. It never fails.
func NewMemoryState() *MemoryState { return &MemoryState{engine.NewMemoryState()} }

// Breaker implements [state.State].
func (s *MemoryState) Breaker(ctx context.Context, key string, op state.BreakerOp) (state.BreakerView, error) {
	return s.m.Breaker(ctx, key, op)
}

// Draw implements [state.State].
func (s *MemoryState) Draw(ctx context.Context, key string, limit int64, ttl time.Duration) (state.DrawView, error) {
	return s.m.Draw(ctx, key, limit, ttl)
}

// Ratio implements [state.State].
func (s *MemoryState) Ratio(ctx context.Context, key string, op state.RatioOp) (state.RatioView, error) {
	return s.m.Ratio(ctx, key, op)
}
