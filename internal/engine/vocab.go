package engine

import (
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/telemetry"
)

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

// StopOutcome is the outcome of a call that stops on an error of class,
// without retrying it: what the class says retrying could not fix. A
// Transient error that is not retried exhausted nothing: the layer makes
// one attempt, and a layer above may retry it.
func StopOutcome(class string) string {
	switch class {
	case Fatal:
		return telemetry.OutcomeFailedFatal
	case Unknown:
		return telemetry.OutcomeFailedUnknown
	case Canceled:
		return telemetry.OutcomeCanceled
	case Transient:
		return telemetry.OutcomeFailedTransient
	case UserAction:
		return telemetry.OutcomeFailedUserAction
	}
	return telemetry.OutcomeFailedPermanent
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
