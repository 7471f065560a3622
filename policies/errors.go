package policies

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/failsafe-go/failsafe-go/timeout"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/redact"
)

// Outcome is how a call through a layer ended.
type Outcome string

const (
	OutcomeSuccess           Outcome = "success"
	OutcomeSuccessAfterRetry Outcome = "success_after_retry"
	OutcomeFailedPermanent   Outcome = "failed_permanent"   // not retried: the identical call fails identically
	OutcomeFailedFatal       Outcome = "failed_fatal"       // not retried: quota or billing, nothing in the task can succeed
	OutcomeFailedUnknown     Outcome = "failed_unknown"     // not retried: no rule recognised the error, and the layer does not retry unknown errors
	OutcomeFailedTransient   Outcome = "failed_transient"   // not retried here: a transient failure in a layer that makes one attempt (a layer above may retry it)
	OutcomeFailedUserAction  Outcome = "failed_user_action" // not retried: the call needs the user to act first (open a URL), then it may succeed
	OutcomeFailedExhausted   Outcome = "failed_exhausted"   // retried until the attempts (or the deadline) ran out
	OutcomeBudgetExhausted   Outcome = "budget_exhausted"   // the task's retry budget refused a retry
	OutcomeRejected          Outcome = "rejected"           // a breaker or bulkhead refused the call, or a circuit beneath stays open too long
	OutcomeCanceled          Outcome = "canceled"           // the caller's context ended
	OutcomeStepLimit         Outcome = "step_limit"         // an agent loop reached its MaxSteps: the last cost boundary
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
// errors.Is and errors.As see through to. It carries the last error's
// classification, so that the layers above read it instead of classifying
// the error again; a layer above that stops on it after one attempt, with
// the same outcome, returns it unchanged.
type FailedError struct {
	Layer    string        // the layer's name, empty for a bare policy
	Outcome  Outcome       // why the layer stopped
	Attempts int           // attempts made, the first included
	Class    Class         // the last error's class
	Type     string        // the last error's error.type
	Reason   string        // the rule that classified it (its Classification's Reason)
	Detail   string        // the outcome in a clause, when it came before the attempts ran out: "the task's retry budget of 2 is spent"
	Err      error         // the last attempt's error
	retry    time.Duration // the last error's Retry-After hint
	cause    error         // the context's cause, when the caller's context ended the call
	known    []string      // the secrets of the layer's context, redacted by exact value
	diag     atomic.Pointer[string]
}

func (e *FailedError) Error() string {
	if e.Layer == "" {
		return e.Diagnosis()
	}
	return e.Layer + ": " + e.Diagnosis()
}

func (e *FailedError) Unwrap() error { return e.Err }

// Underlying is the error beneath retrace's layers in err: the last
// attempt's error of the innermost layer that failed, or err itself when no
// layer's failure is in it. It is what a span status, a turn's error text
// and a diagnosis name: the provider's or the tool's own failure, not the
// layers' narration around it.
func Underlying(err error) error {
	for {
		fe, ok := errors.AsType[*FailedError](err)
		if !ok || fe.Err == nil {
			return err
		}
		err = fe.Err
	}
}

// Is makes a layer that ran out of attempts match failsafe-go's
// retrypolicy.ErrExceeded, one refused by the task budget match
// ErrBudgetExhausted, and one whose caller's context ended match
// context.Canceled or context.DeadlineExceeded, whatever its last attempt
// returned.
func (e *FailedError) Is(target error) bool {
	switch target {
	case retrypolicy.ErrExceeded:
		return e.Outcome == OutcomeFailedExhausted
	case ErrBudgetExhausted:
		return e.Outcome == OutcomeBudgetExhausted
	}
	return e.cause != nil && errors.Is(e.cause, target)
}

// Diagnosis says why the layer stopped, in the words users search for:
// "failed permanently: …", "failed after 3 attempts: …". Secrets are
// redacted. It is worded once per error, when first asked for.
func (e *FailedError) Diagnosis() string {
	if d := e.diag.Load(); d != nil {
		return *d
	}
	d := e.diagnose()
	if len(e.known) > 0 {
		d = redact.Known(d, e.known) // the reason and type too: they are worded from the error's fields
	}
	e.diag.Store(&d)
	return d
}

func (e *FailedError) diagnose() string {
	var b strings.Builder
	b.Grow(diagnosisGrow)
	bracket := func() {
		if _, inner := errors.AsType[*FailedError](e.Err); !inner {
			// The innermost layer says why; the layers above repeat its words.
			b.WriteString(" [")
			b.WriteString(string(e.Class))
			b.WriteString(": ")
			b.WriteString(e.Reason)
			b.WriteString("]")
		}
	}
	if words := stopWords(e.Outcome); words != "" {
		// A stop on the error's class: the words, the error, and, from the
		// innermost layer, the rule; no rule recognised an unknown one.
		b.WriteString(words)
		b.WriteString(brief(e.Err, e.known...))
		if e.Outcome != OutcomeFailedUnknown {
			bracket()
		}
		return b.String()
	}
	switch e.Outcome {
	case OutcomeFailedExhausted:
		b.WriteString("failed after ")
		writeAttempts(&b, e.Attempts)
	case OutcomeBudgetExhausted:
		b.WriteString("retry budget exhausted after ")
		writeAttempts(&b, e.Attempts)
	case OutcomeRejected:
		b.WriteString("rejected after ")
		writeAttempts(&b, e.Attempts)
	case OutcomeCanceled:
		if e.Attempts == 0 {
			b.WriteString("canceled before the first attempt")
			if e.cause != nil {
				b.WriteString(": ")
				b.WriteString(brief(e.cause, e.known...))
			}
			return b.String()
		}
		b.WriteString("canceled after ")
		writeAttempts(&b, e.Attempts)
	case OutcomeStepLimit:
		b.WriteString("stopped at the step limit")
		if e.Attempts > 0 {
			b.WriteString(" after ")
			writeAttempts(&b, e.Attempts)
		}
	default:
		b.WriteString(string(e.Outcome))
	}
	if e.Detail != "" {
		b.WriteString(" (")
		b.WriteString(e.Detail)
		b.WriteString(")")
	}
	b.WriteString(": ")
	b.WriteString(brief(e.Err, e.known...))
	return b.String()
}

// stopWords are the words of a diagnosis of a call that stopped on its
// error's class, without running out of anything; "" for another outcome.
func stopWords(o Outcome) string {
	switch o {
	case OutcomeFailedPermanent:
		return "failed permanently: "
	case OutcomeFailedFatal:
		return "failed fatally, nothing in this task can succeed: "
	case OutcomeFailedUnknown:
		return "failed on an error no rule recognises, not retried: "
	case OutcomeFailedTransient:
		return "failed once, not retried here: "
	case OutcomeFailedUserAction:
		return "failed until the user acts: "
	}
	return ""
}

// diagnosisGrow is what a diagnosis's builder starts with: its words and
// a short error's text fit, so that wording it allocates once.
const diagnosisGrow = 128

// writeAttempts writes "1 attempt" or "n attempts" to b.
func writeAttempts(b *strings.Builder, n int) {
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], int64(n), 10))
	if n == 1 {
		b.WriteString(" attempt")
		return
	}
	b.WriteString(" attempts")
}

// brief is err's text for a diagnosis: redacted (known values first), on
// one line, at most engine.CapDiagnosis bytes.
func brief(err error, known ...string) string {
	if err == nil {
		return "<nil>"
	}
	var s string
	switch e := err.(type) {
	case *FailedError:
		s = e.Error() // redacted already, once, where it was worded
	case *APIError:
		s = redact.Text(e.text(), known, 0)
	default:
		s = engine.ErrorText(err)
		if api, decoded := providerAnswer(err); decoded && api.Message != "" && !strings.Contains(s, api.Message) {
			// An SDK's own text says little ("429 Too Many Requests"): the
			// provider's code and words say what happened.
			s += ": " + api.text()
		}
		s = redact.Text(s, known, 0)
	}
	if strings.TrimSpace(s) == "" {
		s = errorType(err) + " (empty message)"
	}
	return engine.Truncate(oneLine(s), engine.CapDiagnosis)
}

// oneLine collapses runs of white space in s to one space, allocating only
// when there is something to collapse.
func oneLine(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\n' || c == '\t' || c == '\r' || c == ' ' && (i == 0 || i+1 == len(s) || s[i+1] == ' ') {
			return strings.Join(strings.Fields(s), " ")
		}
	}
	return s
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

// typ is the rejection's error.type.
func (e *RejectedError) typ() string {
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
