package telemetry

// The values of retrace.outcome: how a call through a layer ended. A
// *policies.Error that a layer stopped on carries the same value in its
// Outcome field, so that a program reads what the trace says.
const (
	OutcomeSuccess           = "success"
	OutcomeSuccessAfterRetry = "success_after_retry"
	OutcomeFailedPermanent   = "failed_permanent"   // not retried: the identical call fails identically
	OutcomeFailedFatal       = "failed_fatal"       // not retried: quota or billing, nothing in the task can succeed
	OutcomeFailedUnknown     = "failed_unknown"     // not retried: no rule recognised the error, and the layer does not retry unknown errors
	OutcomeFailedTransient   = "failed_transient"   // not retried here: a transient failure in a layer that makes one attempt (a layer above may retry it)
	OutcomeFailedUserAction  = "failed_user_action" // not retried: the call needs the user to act first (open a URL), then it may succeed
	OutcomeFailedExhausted   = "failed_exhausted"   // retried until the attempts (or the deadline) ran out
	OutcomeBudgetExhausted   = "budget_exhausted"   // a retry budget (the task's, or a rate budget) refused a retry
	OutcomeRejected          = "rejected"           // a breaker or bulkhead refused the call, or a circuit beneath stays open too long
	OutcomeCanceled          = "canceled"           // the caller's context ended
	OutcomeStepLimit         = "step_limit"         // an agent loop reached its MaxSteps: the last cost boundary
)
