package policies

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// transientExpr is the regular expression matchTransient replaces; the tests
// hold the matcher to it.
const transientExpr = `(?i)overloaded|rate.?limit|\b429\b|\b5\d\d\b|service.?unavailable|connection.?(error|refused)|other side closed|fetch failed|reset before headers|terminated`

func TestMatchTransient(t *testing.T) {
	re := regexp.MustCompile(transientExpr)
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"invalid image", ""},
		{"Rate limit reached for requests", "rate limit"},
		{"RATELIMIT", "ratelimit"},
		{"rate_limit_exceeded", "rate_limit"},
		{"rate--limit", ""},          // one optional character, not two
		{"rate\nlimit", ""},          // '.' does not match a newline
		{"rate→limit", "rate→limit"}, // the optional character is a whole rune
		{"RATE\u00c9LIMIT", "rate\u00e9limit"},
		{"rate\xfflimit", "rate\ufffdlimit"}, // invalid UTF-8 is one character, lowered to U+FFFD
		{"Service Unavailable", "service unavailable"},
		{"503 Service Unavailable", "503"}, // the leftmost match wins
		{"serviceunavailable", "serviceunavailable"},
		{"ſervice unavailable", "ſervice unavailable"}, // (?i) folds the long s to s
		{"\u212aey overloaded", "overloaded"},
		{"Connection-Error", "connection-error"},
		{"dial tcp: connection refused", "connection refused"},
		{"connection reset by peer", ""},
		{"connectionerror", "connectionerror"},
		{"Overloaded", "overloaded"},
		{"overloaded_error", "overloaded"},
		{"other side closed", "other side closed"},
		{"OTHER SIDE CLOSED", "other side closed"},
		{"TypeError: Fetch Failed", "fetch failed"},
		{"upstream connect error or disconnect/reset before headers", "reset before headers"},
		{"stream TERMINATED", "terminated"},
		{"error 429", "429"},
		{"(429)", "429"},
		{"4290", ""},
		{"x429", ""},
		{"_429", ""},
		{"HTTP 500.", "500"},
		{"5000 tokens", ""},
		{"é599", "599"}, // a non-ASCII rune is not a word character
		{"5a0", ""},
		{"the socket was terminated after 503", "terminated"},
	} {
		got := matchTransient(tt.in)
		assert.Equal(t, tt.want, got, "matchTransient(%q)", tt.in)
		assert.Equal(t, strings.ToLower(re.FindString(tt.in)), got, "the regexp on %q", tt.in)
	}
}

func TestMatchTransientAllocatesNothingForASCII(t *testing.T) {
	for _, msg := range []string{"Rate Limit reached", "503 Service Unavailable", "HTTP/1.1 429 Too Many Requests", "Connection_Refused", "no match at all"} {
		allocs := testing.AllocsPerRun(100, func() { _ = matchTransient(msg) })
		assert.Zero(t, allocs, "%q", msg)
	}
}

func FuzzMatchTransient(f *testing.F) {
	for _, s := range []string{"", "Rate limit", "rate\nlimit", "rate\xfflimit", "ſERVICE UNAVAILABLE", "x429 429_ 429",
		"5999 599", "connection\u00a0refused", "CONNECTIONERROR", "other side closed", "reset before headers",
		"fetch failed", "terminated", "overloaded", "\u212a", "rate\u00c9limit"} {
		f.Add(s)
	}
	re := regexp.MustCompile(transientExpr)
	f.Fuzz(func(t *testing.T, s string) {
		want := strings.ToLower(re.FindString(s))
		if got := matchTransient(s); got != want {
			t.Fatalf("matchTransient(%q) = %q, the regexp finds %q", s, got, want)
		}
	})
}

// transientBenchMessages are ~200-byte provider errors, one without a
// transient phrase and one with it near the end.
var transientBenchMessages = [...]struct{ name, msg string }{
	{"no_match", "400 invalid_request_error: The model `gpt-4o-mini` does not support the parameter `response_format` with type `json_schema` when tools are also given; remove one of them and send the request again, please."},
	{"match", "upstream request failed after the proxy had already written part of the body; the client saw the stream end early with a partial JSON document and then: Service Unavailable, retry later"},
}

func BenchmarkMatchTransient(b *testing.B) {
	re := regexp.MustCompile(transientExpr)
	for _, m := range transientBenchMessages {
		b.Run(m.name+"/matcher", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(m.msg)))
			for b.Loop() {
				_ = matchTransient(m.msg)
			}
		})
		b.Run(m.name+"/regexp", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(m.msg)))
			for b.Loop() {
				_ = strings.ToLower(re.FindString(m.msg))
			}
		})
	}
}
