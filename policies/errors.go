package policies

import (
	"errors"
	"fmt"
	"time"

	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/failsafe-go/failsafe-go/timeout"
)

// Outcome is how a call through a retrying layer ended.
type Outcome string

const (
	OutcomeSuccess           Outcome = "success"
	OutcomeSuccessAfterRetry Outcome = "success_after_retry"
	OutcomeFailedPermanent   Outcome = "failed_permanent" // not retried: retrying cannot help
	OutcomeFailedExhausted   Outcome = "failed_exhausted" // retried until the attempts (or the deadline) ran out
	OutcomeBudgetExhausted   Outcome = "budget_exhausted" // the task's retry budget refused a retry
	OutcomeRejected          Outcome = "rejected"         // the layer's own breaker or bulkhead refused the call
	OutcomeCanceled          Outcome = "canceled"         // the caller's context ended
	OutcomeStepLimit         Outcome = "step_limit"       // an agent loop reached its MaxSteps: the last cost boundary
)

// OutcomeError is an error that says which outcome it ends a layer with,
// such as an agent loop's step limit. A layer that fails with one takes its
// outcome instead of deriving one from the error's class.
type OutcomeError interface {
	error
	Outcome() Outcome
}

// Failed reports whether the outcome is a failure.
func (o Outcome) Failed() bool {
	return o != OutcomeSuccess && o != OutcomeSuccessAfterRetry && o != ""
}

// ErrBudgetExhausted is the error of a retry that the task's retry budget
// refused (see [WithTaskBudget]).
var ErrBudgetExhausted = errors.New("task retry budget exhausted")

// FailedError is the error a retrying layer returns when it gives up: why it
// stopped, after how many attempts, and the last attempt's error, which
// errors.Is and errors.As see through to.
type FailedError struct {
	Layer     string  // the layer's name, empty for a bare policy
	Outcome   Outcome // why the layer stopped
	Attempts  int     // attempts made, the first included
	Class     Class   // the last error's class
	Type      string  // the last error's error.type
	Diagnosis string  // e.g. "failed after 3 attempts: 503: overloaded"
	Err       error   // the last attempt's error
}

func (e *FailedError) Error() string {
	if e.Layer == "" {
		return e.Diagnosis
	}
	return e.Layer + ": " + e.Diagnosis
}

func (e *FailedError) Unwrap() error { return e.Err }

// Is makes a layer that ran out of attempts match failsafe-go's
// retrypolicy.ErrExceeded, and one refused by the task budget match
// ErrBudgetExhausted.
func (e *FailedError) Is(target error) bool {
	switch target {
	case retrypolicy.ErrExceeded:
		return e.Outcome == OutcomeFailedExhausted
	case ErrBudgetExhausted:
		return e.Outcome == OutcomeBudgetExhausted
	}
	return false
}

// RejectedError is a call that a policy refused before it reached the
// handler: an open circuit breaker or a full bulkhead. It matches
// circuitbreaker.ErrOpen or bulkhead.ErrFull with errors.Is.
type RejectedError struct {
	Policy     string        // "circuit_breaker" or "bulkhead"
	Name       string        // the breaker's name, if it has one
	RetryAfter time.Duration // when a call may pass again (the breaker's remaining cool-down), 0 if unknown
	Err        error         // circuitbreaker.ErrOpen or bulkhead.ErrFull
}

func (e *RejectedError) Error() string {
	name := e.Name
	if name != "" {
		name += ": "
	}
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%s%v (retry in %s)", name, e.Err, e.RetryAfter.Round(time.Millisecond))
	}
	return name + e.Err.Error()
}

func (e *RejectedError) Unwrap() error { return e.Err }

// Type is the rejection's error.type.
func (e *RejectedError) Type() string {
	switch {
	case errors.Is(e.Err, circuitbreaker.ErrOpen):
		return "circuit_open"
	case errors.Is(e.Err, bulkhead.ErrFull):
		return "bulkhead_full"
	}
	return e.Policy + "_rejected"
}

// TimeoutError is an attempt cut by a per-attempt timeout of the layer's own:
// Transient, unlike the caller's deadline. It matches timeout.ErrExceeded.
type TimeoutError struct {
	After time.Duration // the limit
	Err   error         // what the handler returned when it was cut, if anything
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("attempt timed out after %s", e.After)
}

func (e *TimeoutError) Is(target error) bool { return target == timeout.ErrExceeded }

func (e *TimeoutError) Unwrap() error { return e.Err }
