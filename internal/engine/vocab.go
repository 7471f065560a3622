package engine

import "github.com/retrace-go/retrace/policies/state"

// The error classes, as package policies publishes them (policies.Class).
// The engine decides by them, so they are defined once, here.
const (
	Transient       = "transient"
	Permanent       = "permanent"
	Fatal           = "fatal"
	ContextOverflow = "context_overflow"
	Programming     = "programming"
	Canceled        = "canceled"
	Unknown         = "unknown"
	UserAction      = "user_action"
)

// The outcomes of a call through a layer (policies.Outcome).
const (
	OutcomeSuccess           = "success"
	OutcomeSuccessAfterRetry = "success_after_retry"
	OutcomeFailedPermanent   = "failed_permanent"
	OutcomeFailedFatal       = "failed_fatal"
	OutcomeFailedUnknown     = "failed_unknown"
	OutcomeFailedTransient   = "failed_transient"
	OutcomeFailedUserAction  = "failed_user_action"
	OutcomeFailedExhausted   = "failed_exhausted"
	OutcomeBudgetExhausted   = "budget_exhausted"
	OutcomeRejected          = "rejected"
	OutcomeCanceled          = "canceled"
	OutcomeStepLimit         = "step_limit"
)

// StopOutcome is the outcome of a call that stops on an error of class,
// without retrying it: what the class says retrying could not fix. A
// Transient error that is not retried exhausted nothing: the layer makes
// one attempt, and a layer above may retry it.
func StopOutcome(class string) string {
	switch class {
	case Fatal:
		return OutcomeFailedFatal
	case Unknown:
		return OutcomeFailedUnknown
	case Canceled:
		return OutcomeCanceled
	case Transient:
		return OutcomeFailedTransient
	case UserAction:
		return OutcomeFailedUserAction
	}
	return OutcomeFailedPermanent
}

// CountOf is how a breaker counts an error of class ("" for a success).
func CountOf(class string) state.Count {
	switch class {
	case Transient:
		return state.Fail
	case Canceled, Programming, Unknown, UserAction:
		return state.Ignore
	}
	return state.Success
}
