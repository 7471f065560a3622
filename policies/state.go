package policies

import "github.com/retrace-go/retrace/internal/engine"

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
type State = engine.State

// MemoryState is a [State] in one process's memory.
type MemoryState = engine.MemoryState

// NewMemoryState returns a [State] in this process's memory, shared by every
// policy given it: a fleet of workers that run as goroutines. It never fails.
func NewMemoryState() *MemoryState { return engine.NewMemoryState() }
