package policies

import (
	"fmt"
	"io"
)

// Format writes an Error, held by value or by pointer, as its Error text
// with every verb. An Error keeps the secrets of the call that failed, to
// redact what it words later; fmt's default for a struct would print them
// as they are (%v, %+v and %#v of an Error value), so no verb prints the
// fields, only the text that was redacted.
func (e Error) Format(f fmt.State, verb rune) {
	text := (&e).Error()
	switch verb {
	case 'v', 's':
		_, _ = io.WriteString(f, text)
	case 'q':
		_, _ = fmt.Fprintf(f, "%q", text)
	default:
		_, _ = fmt.Fprintf(f, "%%!%c(*policies.Error=%s)", verb, text)
	}
}
