package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
)

// retrace's own attributes.
const (
	Layer          = attribute.Key("retrace.layer")            // layer span: runtime, session, model, tool, http, or the user's name
	Attempt        = attribute.Key("retrace.attempt")          // attempt span: 1-based attempt number
	Attempts       = attribute.Key("retrace.attempts")         // retrying layer span: attempts made
	MaxAttempts    = attribute.Key("retrace.max_attempts")     // retrying layer span: the limit; absent when unknown (a failsafe-go retry policy's) and, on the outermost layer span, when it equals retrace.calls.worst_case, which then states it
	RetryDelayMs   = attribute.Key("retrace.retry.delay_ms")   // attempt span: the backoff waited before this attempt (absent on the first)
	RetryDepth     = attribute.Key("retrace.retry.depth")      // layer span, when not zero: retrying layers enclosing this one; absent means 0 (no retrying layer encloses it, as none encloses the outermost)
	ErrorClass     = attribute.Key("retrace.error.class")      // failed span: a policies.Class
	ErrorReason    = attribute.Key("retrace.error.reason")     // failed attempt span (a layer span when it has no attempt spans): the rule that classified the error ("http 429", "marker: invalid api key")
	Outcome        = attribute.Key("retrace.outcome")          // layer span: how the call ended, one of the Outcome… values (success, success_after_retry, failed_permanent, failed_fatal, failed_unknown, failed_transient, failed_user_action, failed_exhausted, budget_exhausted, rejected, canceled, step_limit)
	Diagnosis      = attribute.Key("retrace.diagnosis")        // failed retrying layer span: "failed after 3 attempts: …", "failed permanently: …"
	Calls          = attribute.Key("retrace.calls")            // outermost layer span: leaf calls made beneath it
	CallsWorstCase = attribute.Key("retrace.calls.worst_case") // outermost layer span and nested-retry event: the most leaf calls the layers beneath could make (max attempts × the costliest attempt; a loop's MaxSteps × its costliest step), never below retrace.calls
	CallsUntraced  = attribute.Key("retrace.calls.untraced")   // outermost layer span, when not zero: leaf calls made beneath it whose spans were not recorded (their layer's tracer provider records nothing), which retrace.calls does not count
	CallsUncounted = attribute.Key("retrace.calls.uncounted")  // outermost layer span, when not zero: leaf calls made beneath it that retrace.calls does not count, each span saying why (retrace.uncounted)
	Uncounted      = attribute.Key("retrace.uncounted")        // leaf span that retrace.calls does not count, and why: unsent (it reached nothing: its session had ended, its connection was refused), handshake (a session's set-up: server/discover, initialize), notification (a one-way message)
	// ConversationCompacted is on the chat span: true when the call was
	// made with a history compacted after a context overflow.
	ConversationCompacted = attribute.Key("retrace.conversation.compacted")
	Policy                = attribute.Key("retrace.policy")           // policy span and state-degraded event: circuit_breaker, bulkhead, timeout; budget on the event
	CircuitState          = attribute.Key("retrace.circuit.state")    // breaker span (or attempt span): closed, open, half_open
	RetryAfterMs          = attribute.Key("retrace.retry.after_ms")   // failed span: the wait the server (Retry-After) or a breaker asked for
	BudgetLeft            = attribute.Key("retrace.budget.remaining") // layer span: task retries left when the layer ended
	NestedLayers          = attribute.Key("retrace.nested.layers")    // nested-retry event: the retrying layers, outermost first

	TaskID        = attribute.Key("retrace.task.id")         // task span: the task's ID
	TaskSteps     = attribute.Key("retrace.task.steps")      // task span: the steps it has
	TaskResumedAt = attribute.Key("retrace.task.resumed_at") // task span: the first step this run makes
	Step          = attribute.Key("retrace.step")            // step span: the step's number, from 1
	StepKey       = attribute.Key("retrace.step.key")        // step span: its idempotency key

	CompactionBefore = attribute.Key("retrace.compaction.messages_before") // compaction event: messages before
	CompactionAfter  = attribute.Key("retrace.compaction.messages_after")  // compaction event: messages after
)

// The values of retrace.policy.
const (
	PolicyCircuitBreaker = "circuit_breaker"
	PolicyBulkhead       = "bulkhead"
	PolicyTimeout        = "timeout"
)

// The values of retrace.uncounted.
const (
	UncountedUnsent       = "unsent"
	UncountedHandshake    = "handshake"
	UncountedNotification = "notification"
)

// The values of retrace.circuit.state.
const (
	CircuitClosed   = "closed"
	CircuitOpen     = "open"
	CircuitHalfOpen = "half_open"
)

// Span events.
const (
	// EventNestedRetry is added to the outermost layer span when a retrying
	// layer starts inside another: its attributes name the layers and the
	// worst case of calls, before the calls happen.
	EventNestedRetry = "retrace.nested_retry"
	// EventCompacted is added when a session compacts its history after a
	// context overflow.
	EventCompacted = "retrace.session.compacted"
)
