package engine

import (
	"net/http"
	"testing"
	"time"
)

// A Retry-After hint, whatever the server sends, is never negative and
// never panics; a plain number of seconds in range is read as such.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"3", "1.5", "-1", "1e300", "Inf", "NaN", "10000000000", "soon", "", " 7 ", "Wed, 21 Oct 2026 07:28:00 GMT"} {
		f.Add(s, "")
		f.Add("", s)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ra, ms string) {
		h := http.Header{}
		if ra != "" {
			h.Set("Retry-After", ra)
		}
		if ms != "" {
			h.Set("retry-after-ms", ms)
		}
		if d := ParseRetryAfter(h, now); d < 0 {
			t.Fatalf("Retry-After %q, retry-after-ms %q: %v", ra, ms, d)
		}
	})
}
