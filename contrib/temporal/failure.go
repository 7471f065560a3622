package retracetemporal

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/telemetry"
)

// Config configures the interceptor.
type Config struct {
	// RetryUnknown lets Temporal retry an error no rule recognises (class
	// unknown), which retrace's own layers do not retry.
	RetryUnknown bool
	// Classifier reads an activity's error; nil → the default rules
	// (policies.Classify). Give the classifier the activity's own layers
	// use, so that Temporal and they agree.
	Classifier *policies.Classifier
	// TaskBudget, above 0, is the retries a workflow's activities may make
	// in all, Temporal's and every retrace layer's beneath alike, across
	// attempts and workers: one count per workflow ID on State. An
	// activity attempt after the first draws one before it runs; when none
	// is left it does not run, and Temporal stops retrying it
	// (budget_exhausted).
	TaskBudget int
	// State keeps the task budget: a shared one (contrib/redis) for a
	// fleet of workers; nil → this worker's memory.
	State state.State
	// Options configure each attempt's layer (its tracer and meter
	// providers, its clock).
	Options []middleware.Option
	// Secrets are credentials to redact, by exact value, from what Temporal
	// records of a failure (its history keeps it); patterns of known
	// credentials are redacted besides (policies.Redact).
	Secrets []string
}

// Failure is retrace's reading of an activity's failure, the details of
// the ApplicationError the interceptor returns: what a workflow that
// catches the error reads with ApplicationError.Details.
type Failure struct {
	Class      string        `json:"class"`                // transient, permanent, fatal, …
	Type       string        `json:"type,omitempty"`       // error.type: a provider's code, an HTTP status
	Reason     string        `json:"reason,omitempty"`     // the rule that decided
	StatusCode int           `json:"statusCode,omitempty"` // the HTTP status of the answer
	Code       string        `json:"code,omitempty"`       // the server's error code
	RetryAfter time.Duration `json:"retryAfter,omitempty"` // the server's hint, or a breaker's remaining cool-down
	Layer      string        `json:"layer,omitempty"`      // the retrace layer that stopped on it
	Outcome    string        `json:"outcome,omitempty"`    // why that layer stopped
	Attempts   int           `json:"attempts,omitempty"`   // the attempts that layer made
	TraceID    string        `json:"traceId,omitempty"`    // the trace that recorded it
}

// ApplicationError returns err as Temporal should read it (see the package
// documentation): nil for nil; a Temporal error, a canceled context's and
// a panic's recovered by Temporal as they are; any other, an
// *temporal.ApplicationError whose type is retrace's class of err, which
// it wraps.
func (cfg Config) ApplicationError(err error) error {
	if err == nil || isTemporal(err) || errors.Is(err, context.Canceled) {
		return err
	}
	var cl policies.Classification
	if cfg.Classifier != nil {
		cl = cfg.Classifier.Classify(err)
	} else {
		cl = policies.Classify(err)
	}
	f := Failure{Class: string(cl.Class), Type: cl.Type, Reason: cl.Reason, RetryAfter: cl.RetryAfter}
	if e, ok := errors.AsType[*policies.Error](err); ok {
		f.StatusCode, f.Code, f.Layer, f.Outcome, f.Attempts = e.StatusCode, e.Code, e.Layer, e.Outcome, e.Attempts
		if f.RetryAfter == 0 {
			f.RetryAfter = e.RetryAfter
		}
	}
	// The words of a rule or a server's code name no credential as a rule
	// writes them, but a classifier of the user's may quote the error.
	f.Reason, f.Code = policies.Redact(f.Reason, cfg.Secrets...), policies.Redact(f.Code, cfg.Secrets...)
	if sc, ok := policies.TraceOf(err); ok {
		f.TraceID = sc.TraceID().String()
	}
	retry := cl.Class == policies.Transient || cl.Class == policies.Unknown && cfg.RetryUnknown
	if f.Outcome == telemetry.OutcomeBudgetExhausted {
		// A retry budget refused the retry the error would have had: the
		// task has spent what it may, and Temporal's retry would spend more.
		retry = false
	}
	cause := &redacted{err: err, msg: policies.Redact(err.Error(), cfg.Secrets...)}
	opts := temporal.ApplicationErrorOptions{NonRetryable: !retry, Cause: cause, Details: []any{f}}
	if retry {
		opts.NextRetryDelay = f.RetryAfter
	}
	return temporal.NewApplicationErrorWithOptions(cause.msg, f.Class, opts)
}

// redacted is an activity's error as Temporal records it: its message
// redacted, and nothing beneath it, since Temporal records the message of
// every error an Unwrap reaches (an SDK's error carries the request and the
// answer's body). errors.Is and errors.As still reach the error, in the
// activity's process.
type redacted struct {
	err error
	msg string
}

func (r *redacted) Error() string        { return r.msg }
func (r *redacted) Is(target error) bool { return errors.Is(r.err, target) }
func (r *redacted) As(target any) bool   { return errors.As(r.err, target) }

// isTemporal reports whether err is already an error Temporal reads as
// the activity meant it: an ApplicationError, a canceled error, a panic's.
func isTemporal(err error) bool {
	var app *temporal.ApplicationError
	var canceled *temporal.CanceledError
	var panicked *temporal.PanicError
	return errors.As(err, &app) || errors.As(err, &canceled) || errors.As(err, &panicked)
}
