package retracegenkit

import (
	"errors"

	"github.com/firebase/genkit/go/core/status"

	"github.com/retrace-go/retrace/policies"
)

// genkitError is the error a model call's layers gave up with, as genkit's
// middleware reads it. Genkit's Retry and Fallback (plugins/middleware)
// decide on the genkit status of the outermost status error in the chain,
// and retry an error that has none: compat_oai marks a spent quota
// RESOURCE_EXHAUSTED, as it marks a rate limit, and a Retry listed before
// retrace's middleware would call the inference layer again for what
// retrace knows will fail again. So an error retrace does not retry (fatal,
// permanent, a context overflow, a bug, an unknown error) is returned in a
// status error that Retry does not retry either, unless the status it
// carries already says so; a transient one keeps the provider's status,
// which genkit may retry. The status error wraps the layer's error with %w:
// errors.As and errors.Is reach the layer's *policies.Error, and the
// provider's error beneath it, as before.
func genkitError(err error) error {
	fe, ok := errors.AsType[*policies.Error](err)
	if !ok || fe.Outcome == "" || fe.Class.Retryable() || fe.Class == policies.Canceled {
		return err
	}
	if s, ok := status.Classified(err); ok && !retriedByGenkit(s) {
		return err // a 401's UNAUTHENTICATED, a 400's INVALID_ARGUMENT
	}
	return status.Errorf(statusOf(fe.Class), "%w", err)
}

// statusOf is the genkit status of an error of class c that is not to be
// sent again as it is.
func statusOf(c policies.Class) *status.Sentinel {
	switch c {
	case policies.Fatal:
		// The account must change (quota, billing) before any call can
		// succeed: the state the call needs is missing.
		return status.ErrFailedPrecondition
	case policies.Permanent, policies.ContextOverflow:
		// The identical request fails identically.
		return status.ErrInvalidArgument
	default:
		// A bug, or an error no rule knows: UNKNOWN, which genkit's Retry
		// and Fallback leave alone, where INTERNAL would be retried.
		return status.ErrUnknown
	}
}

// retriedByGenkit reports whether genkit's Retry retries a status by default
// (its defaultRetryStatuses), and its Fallback falls back on it.
func retriedByGenkit(s status.Name) bool {
	switch s {
	case status.Unavailable, status.DeadlineExceeded, status.ResourceExhausted, status.Aborted, status.Internal:
		return true
	}
	return false
}
