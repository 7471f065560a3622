// Package policies decides what an error means and what to do about it.
//
// [Classify] sorts any error into a [Class] (what retrying can achieve) with a
// low-cardinality type and the rule that decided. The failsafe-go policies
// built here act on that class: [NewRetry] retries only what may succeed, with
// exponential backoff and jitter, a server's Retry-After and a task-wide retry
// budget ([WithTaskBudget]); [NewCircuitBreaker] counts only Transient
// failures; [NewBulkhead] and [NewTimeout] bound concurrency and time. The
// presets [SessionRetry], [RuntimeRetry] and [ToolRetry] carry the defaults
// of an agent's three layers: a session makes up to 4 attempts at a model
// turn, a runtime 3 at its exec, a tool 3 at a call, with jittered backoff.
//
// Every policy here is a failsafe-go policy and works with failsafe.With; the
// middleware package runs them with a span per layer, attempt and policy.
//
//	retry := policies.NewRetry[string](policies.ToolRetry)
//	breaker := policies.NewCircuitBreaker[string](policies.BreakerConfig{})
//	s, err := failsafe.With(retry, breaker).Get(search)
package policies
