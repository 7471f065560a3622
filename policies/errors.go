package policies

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"

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
	d := e.word()
	if len(e.known) > 0 {
		d = redact.Known(d, e.known) // the reason and type too: they are worded from the error's fields
	}
	if e.diag != nil && e.diag.claimed.CompareAndSwap(false, true) {
		e.diag.own = d
		e.diag.text.Store(&e.diag.own)
	}
	return d
}

// word words the diagnosis, or takes the one its policy's last stop was
// worded with when that stop read the same: the same outcome, attempts,
// class and rule, over an error of the same text. A layer stops the same
// way again and again (a provider that is down, each call exhausting its
// attempts on the same answer), and the wording redacts that text, which
// is what a stop costs most to word. Only a stop whose context names no
// secret, over an error whose text is redacted here, is remembered: a
// known secret is the call's own, and a stop's text beneath was worded by
// its own layer.
func (e *Error) word() string {
	var m *diagnoses
	if e.diag != nil && len(e.known) == 0 && e.cause == nil {
		m = e.diag.memo
	}
	src, raw, done := briefText(e.Err, e.known)
	if m == nil || done || !raw {
		return e.diagnose(finishBrief(e.Err, src, raw, done, e.known))
	}
	key := wordedFrom{outcome: e.Outcome, detail: e.Detail, class: e.Class, reason: e.Reason, attempts: e.Attempts, bracket: e.bracketed(), source: src}
	if w := m.last.Load(); w != nil && w.from == key {
		return w.text
	}
	w := &worded{from: key, text: e.diagnose(finishBrief(e.Err, src, raw, done, nil))}
	m.last.Store(w)
	return w.text
}

// diagnoses is where a retry policy remembers the last diagnosis its
// stops were worded with (Error.word).
type diagnoses struct{ last atomic.Pointer[worded] }

// worded is a diagnosis and what it was worded from.
type worded struct {
	from wordedFrom
	text string
}

// wordedFrom is what decides a stop's diagnosis: the stop's fields it
// reads, whether it names the rule (bracketed), and the text of the error
// beneath before redaction.
type wordedFrom struct {
	outcome, detail, reason string
	class                   Class
	attempts                int
	bracket                 bool
	source                  string
}

// bracketed reports whether the diagnosis names the class and the rule
// that decided: a stop on the error's class (no rule decided an unknown
// one) that no layer beneath stopped on already (the innermost layer says
// why; the layers above repeat its words).
func (e *Error) bracketed() bool {
	if stopWords(e.Outcome) == "" || e.Outcome == telemetry.OutcomeFailedUnknown {
		return false
	}
	inner, ok := errors.AsType[*Error](e.Err)
	return !ok || inner.Outcome == ""
}

// diagnose words the diagnosis of a stop over an error beneath whose
// brief is below.
func (e *Error) diagnose(below string) string {
	var b strings.Builder
	b.Grow(diagnosisGrow)
	if words := stopWords(e.Outcome); words != "" {
		// A stop on the error's class: the words, the error, and, from the
		// innermost layer, the rule; no rule recognised an unknown one.
		b.WriteString(words)
		b.WriteString(below)
		if e.bracketed() {
			b.WriteString(" [")
			b.WriteString(string(e.Class))
			b.WriteString(": ")
			b.WriteString(e.Reason)
			b.WriteString("]")
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
	b.WriteString(below)
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
	s, raw, done := briefText(err, known)
	return finishBrief(err, s, raw, done, known)
}

// briefText is what brief words err from: a server's answer, or the
// error's text with the provider's words it lacks, still to be redacted
// (raw); a stop's own words, redacted where they were worded; or, done,
// brief's whole answer (nil, a refusal beside the failure before it).
func briefText(err error, known []string) (s string, raw, done bool) {
	if err == nil {
		return "<nil>", false, true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		// A refusal that ended a retry beside the failure before it (a
		// breaker that opened on it): both, in that order, said apart.
		if errs := j.Unwrap(); len(errs) == 2 {
			if r, ok := errs[0].(*Error); ok && isRejection(r) {
				return engine.Truncate(brief(r, known...)+"; the last failure: "+brief(errs[1], known...), engine.CapDiagnosis), false, true
			}
		}
	}
	switch e, ok := err.(*Error); {
	case ok && e.Outcome != "":
		return e.Error(), false, false // redacted already, once, where it was worded
	case ok && e.Type != typeStreamDropped && (e.StatusCode != 0 || e.Code != "" || e.Message != ""):
		return e.text(), true, false
	}
	s = engine.ErrorText(err)
	if api, decoded := providerAnswer(err); decoded && api.Message != "" && !strings.Contains(s, api.Message) {
		// An SDK's own text says little ("429 Too Many Requests"): the
		// provider's code and words say what happened.
		s += ": " + api.text()
	}
	return s, true, false
}

// finishBrief is brief of err from its briefText s: redacted when raw, on
// one line, cut.
func finishBrief(err error, s string, raw, done bool, known []string) string {
	if done {
		return s
	}
	if raw {
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
