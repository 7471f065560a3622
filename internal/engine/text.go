package engine

import (
	"fmt"
	"unicode/utf8"
)

// The caps on the text retrace writes, in bytes, by where the text goes: one
// table, so that the sinks of one failure's text are bounded alike and a
// cap changes in one place. Every cut is Truncate's, marked with "…".
const (
	// CapAPIMessage is the provider's message an *APIError keeps: it goes
	// into errors, spans and the history sent with every later request.
	CapAPIMessage = 1 << 10
	// CapSpanStatus is a span's status description.
	CapSpanStatus = 1 << 10
	// CapDiagnosis is the error's own words in a diagnosis
	// (retrace.diagnosis, FailedError.Error), after the layer's.
	CapDiagnosis = 400
	// CapToolFailure is the error's words in the failure a model reads
	// from a tool: room for what went wrong, not for a stack dump.
	CapToolFailure = 500
	// CapTurnError is a failed turn's text in the history
	// (session.MaxErrorText).
	CapTurnError = 2 << 10
)

// ErrorText is err.Error(), or a note of the panic it raised: a handler's or
// tool's nil *T error whose Error method dereferences must not take the
// layer, and the permits it holds, down.
func ErrorText(err error) (s string) {
	defer func() {
		if v := recover(); v != nil {
			s = fmt.Sprintf("%T (its Error method panicked: %v)", err, v)
		}
	}()
	return err.Error()
}

// Truncate cuts s to at most n bytes at a character boundary, marking the
// cut with "…": the one rule for every length limit on text retrace writes.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
