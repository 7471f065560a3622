package policies

import (
	"errors"
	"strconv"
	"strings"

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

// Failed reports whether the outcome is a failure.
func (o Outcome) Failed() bool {
	return o != OutcomeSuccess && o != OutcomeSuccessAfterRetry && o != ""
}

// ErrBudgetExhausted is the error of a retry that the task's retry budget
// refused (see [WithTaskBudget]).
var ErrBudgetExhausted = errors.New("task retry budget exhausted")

// Underlying is the error beneath retrace's layers in err: the last
// attempt's error of the innermost layer that failed, or err itself when no
// layer's failure is in it. It is what a span status, a turn's error text
// and a diagnosis name: the provider's or the tool's own failure, not the
// layers' narration around it.
func Underlying(err error) error {
	for {
		fe, ok := errors.AsType[*Error](err)
		if !ok || fe.Outcome == "" || fe.Err == nil {
			return err
		}
		err = fe.Err
	}
}

// Diagnosis says why the layer stopped, in the words users search for:
// "failed permanently: …", "failed after 3 attempts: …". Secrets are
// redacted. It is worded once per error, when first asked for.
func (e *Error) Diagnosis() string {
	if e.diag != nil {
		if d := e.diag.text.Load(); d != nil {
			return *d
		}
	}
	d := e.diagnose()
	if len(e.known) > 0 {
		d = redact.Known(d, e.known) // the reason and type too: they are worded from the error's fields
	}
	if e.diag != nil && e.diag.claimed.CompareAndSwap(false, true) {
		e.diag.own = d
		e.diag.text.Store(&e.diag.own)
	}
	return d
}

func (e *Error) diagnose() string {
	var b strings.Builder
	b.Grow(diagnosisGrow)
	bracket := func() {
		if inner, ok := errors.AsType[*Error](e.Err); !ok || inner.Outcome == "" {
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
	switch e, ok := err.(*Error); {
	case ok && e.Outcome != "":
		s = e.Error() // redacted already, once, where it was worded
	case ok && e.Type != typeStreamDropped && (e.StatusCode != 0 || e.Code != "" || e.Message != ""):
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
