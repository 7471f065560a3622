package policies

import (
	"errors"
	"strconv"
	"strings"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/telemetry"
)

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
		if e.Outcome != telemetry.OutcomeFailedUnknown {
			bracket()
		}
		return b.String()
	}
	switch e.Outcome {
	case telemetry.OutcomeFailedExhausted:
		b.WriteString("failed after ")
		writeAttempts(&b, e.Attempts)
	case telemetry.OutcomeBudgetExhausted:
		b.WriteString("retry budget exhausted after ")
		writeAttempts(&b, e.Attempts)
	case telemetry.OutcomeRejected:
		b.WriteString("rejected after ")
		writeAttempts(&b, e.Attempts)
	case telemetry.OutcomeCanceled:
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
	case telemetry.OutcomeStepLimit:
		b.WriteString("stopped at the step limit")
		if e.Attempts > 0 {
			b.WriteString(" after ")
			writeAttempts(&b, e.Attempts)
		}
	default:
		b.WriteString(e.Outcome)
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
func stopWords(o string) string {
	switch o {
	case telemetry.OutcomeFailedPermanent:
		return "failed permanently: "
	case telemetry.OutcomeFailedFatal:
		return "failed fatally, nothing in this task can succeed: "
	case telemetry.OutcomeFailedUnknown:
		return "failed on an error no rule recognises, not retried: "
	case telemetry.OutcomeFailedTransient:
		return "failed once, not retried here: "
	case telemetry.OutcomeFailedUserAction:
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
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		// A refusal that ended a retry beside the failure before it (a
		// breaker that opened on it): both, in that order, said apart.
		if errs := j.Unwrap(); len(errs) == 2 {
			if r, ok := errs[0].(*Error); ok && isRejection(r) {
				return engine.Truncate(brief(r, known...)+"; the last failure: "+brief(errs[1], known...), engine.CapDiagnosis)
			}
		}
	}
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
