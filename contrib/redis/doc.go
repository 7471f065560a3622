// Package redisstate shares retrace's circuit breakers and retry budgets
// across a fleet of workers through Redis: it implements [state.State]
// and [state.Stepper] with one Lua script, run once per step or per batch
// of steps, so that every read and update of a breaker, a task's retry
// count or a fleet's retry window is atomic on the server.
//
//	rdb := redis.NewClient(redisstate.ClientOptions("127.0.0.1:6379", redisstate.DefaultTimeout))
//	st := redisstate.New(rdb, redisstate.Options{})
//	breaker := policies.NewCircuitBreaker[Reply](policies.BreakerConfig{Name: "openai", State: st})
//	budget := policies.NewRetryBudget(policies.RetryBudgetConfig{Name: "openai", State: st})
//	ctx = policies.WithSharedTaskBudget(ctx, st, taskID, 6)
//
// Every step has a short timeout (Options.Timeout, 25 ms by default). A step
// that fails or times out returns an error, and the policy decides on its
// local state instead: Redis being slow or down never fails or holds a
// call, and the span of each such decision says retrace.state=local with a
// retrace.state.degraded event.
//
// Keys are namespaced (Options.Namespace, "retrace" by default) and expire:
// a breaker's record after its StateTTL, a task's count a day after its
// last draw, a retry window three windows after its first step.
package redisstate
