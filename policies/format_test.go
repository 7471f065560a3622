package policies

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// No verb prints an Error's fields: the secrets it keeps to redact with
// never reach a formatted string, from an Error value or a pointer.
func TestFormatPrintsNoSecret(t *testing.T) {
	const key = "sk-live-0123456789abcdefghij"
	e := &Error{Class: Permanent, Type: "invalid_api_key", Layer: "session", Outcome: "failed_permanent", Attempts: 1,
		Err: errors.New("401 bad key " + key), known: []string{key}}
	want := e.Error()
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q", "%d", "%x"} {
		for _, v := range []any{e, *e} {
			got := fmt.Sprintf(f, v)
			if strings.Contains(got, key) {
				t.Errorf("Sprintf(%q, %T) = %q: holds the key", f, v, got)
			}
			if !strings.Contains(got, "REDACTED") {
				t.Errorf("Sprintf(%q, %T) = %q, want it to say the redacted text %q", f, v, got, want)
			}
		}
	}
	if got := fmt.Sprintf("%v", *e); got != want {
		t.Errorf("%%v of the value = %q, want %q", got, want)
	}
	if got := fmt.Errorf("exec: %w", e).Error(); got != "exec: "+want {
		t.Errorf("wrapped = %q", got)
	}
}
