// Package tool puts an agent's tool calls under governance: classification,
// backoff with jitter and a budget, a circuit breaker, made into rules the
// program enforces.
//
// [New] wraps any func(ctx, args) (result, error) in a named chain: its
// errors are classified (a tool may return a policies.Error or any error),
// retried with backoff and jitter (policies.ToolRetry: 3 attempts,
// the first call included), refused by a per-tool circuit breaker after 5
// consecutive Transient failures, bounded by a bulkhead, and drawn from the
// task's retry budget (policies.WithTaskBudget, say 6 retries across all of a task's
// tools). Each call is an "execute_tool {name}" span.
//
// Intermediate retries never reach the model. [Tool.Invoke] gives it only the
// final result: the tool's value, or a structured failure it can act on,
//
//	{"error": {"class": "transient", "retryable": true, "message": "…", "retry_after_s": 43,
//	           "hint": "search_docs is unavailable, circuit open for another 43 s: use another tool or answer with what you have"}}
//
// instead of an error text that leaves it guessing whether to try again.
// A [Box] holds an agent's tools and answers its tool calls.
package tool
