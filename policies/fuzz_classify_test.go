package policies_test

import (
	"errors"
	"fmt"
	"testing"

	. "github.com/retrace-go/retrace/policies"
)

var classes = map[Class]bool{Transient: true, Permanent: true, Fatal: true, ContextOverflow: true, Programming: true, Canceled: true, Unknown: true}

// Classification never panics, always names a known class and a type, and
// decides an API error by its status before its words: a 5xx or 429 that
// is not quota is Transient, a 401 or 403 Permanent.
func FuzzClassify(f *testing.F) {
	f.Add(503, "server_error", "The server had an error", false)
	f.Add(429, "insufficient_quota", "You exceeded your current quota", true)
	f.Add(401, "invalid_api_key", "Incorrect API key provided: sk-proj-abc", false)
	f.Add(400, "context_length_exceeded", "maximum context length is 128000 tokens", true)
	f.Add(0, "", "", false)
	f.Add(0, "overloaded_error", "Overloaded", true)
	f.Add(-1, "\xff\xfe", "connection refused\x00", true)
	f.Fuzz(func(t *testing.T, status int, code, msg string, wrap bool) {
		api := &Error{StatusCode: status, Code: code, Message: msg}
		var err error = api
		if wrap {
			err = fmt.Errorf("calling the provider: %w", err)
		}
		for _, e := range []error{err, errors.New(msg), &Error{Class: Transient, Err: err}} {
			c := Classify(e)
			if !classes[c.Class] {
				t.Fatalf("Classify(%q) = unknown class %q", e, c.Class)
			}
			if c.Type == "" || c.Reason == "" {
				t.Fatalf("Classify(%q) = %+v: no type or reason", e, c)
			}
		}
		c := Classify(err)
		words := Classify(errors.New(code + " " + msg)).Class
		switch {
		case status == 401 || status == 403:
			if c.Class != Permanent && c.Class != ContextOverflow && c.Class != Fatal {
				t.Fatalf("status %d classified %s", status, c.Class)
			}
		case status >= 500 && words != ContextOverflow && words != Permanent && code != "insufficient_quota" && code != "billing_error":
			if c.Class != Transient && c.Class != Fatal && c.Class != ContextOverflow && c.Class != Permanent {
				t.Fatalf("status %d classified %s", status, c.Class)
			}
		}
	})
}
