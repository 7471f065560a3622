package engine

import (
	"fmt"
	"unicode/utf8"
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
