package redact

import (
	"strings"
	"testing"
)

// benchText repeats a provider's error text full of the words the rules
// start with ("key", "token", "sk-", "Bearer", URLs), some secrets among
// them, to n bytes.
func benchText(n int) string {
	const para = "the key was rejected; tokens used: 1234; an sk- prefix; rate limit for key org-abc; " +
		"api_key=abcd1234efgh and Bearer eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJlMTIzNDU2 sent; " +
		"task-management-system risk-assessment-v2 invalid_key_sk-proj-abcdef1234567890 seen at " +
		"https://user:pa55word@api.example.com/v1/chat?token=s3cr3t&model=gpt-4o; request " +
		"req_8f9e7d6c5b4a39281706f5e4d3c2b1a0 key 0123456789abcdef0123456789abcdef expired.\n"
	return strings.Repeat(para, n/len(para)+1)[:n]
}

// benchCases are the texts the benchmarks redact: short ones as providers
// send them, a megabyte of benchText, and inputs that would make a scanner
// that rereads text quadratic.
func benchCases() []struct{ name, text string } {
	const mib = 1 << 20
	return []struct{ name, text string }{
		{"short_plain", "503 server_error: The server had an error while processing your request. Sorry about that!"},
		{"short_secret", "401 invalid_api_key: Incorrect API key provided: sk-proj-AbCdEf1234567890"},
		{"1MiB", benchText(mib)},
		{"4MiB", benchText(4 * mib)},
		{"1MiB_glued_prefixes", strings.Repeat("ask-", mib/4)},
		{"1MiB_short_keys", strings.Repeat("sk-abcdef.", mib/10)},
		{"1MiB_names", strings.Repeat("token ", mib/6)},
		{"1MiB_schemes", strings.Repeat("a://", mib/4)},
		{"1MiB_bearers", strings.Repeat("Bearer ", mib/7)},
		{"1MiB_one_token", strings.Repeat("0123456789abcdef", mib/16)},
		{"1MiB_one_word", strings.Repeat("a", mib)},
		{"1MiB_cookies", strings.Repeat("Cookie:-", mib/8)},
		{"1MiB_token_words", strings.Repeat("credential -", mib/12)},
		{"1MiB_url_path", "https://h/" + strings.Repeat("abcdefgh12345678/", mib/17)},
	}
}

func BenchmarkRedact(b *testing.B) {
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.text)))
			for b.Loop() {
				_ = Text(bc.text, nil, 0)
			}
		})
	}
}

// BenchmarkIsSecret times "is this a secret?", which Text(s) != s answered
// before: no output is built, and a secret ends the scan.
func BenchmarkIsSecret(b *testing.B) {
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.text)))
			for b.Loop() {
				_ = IsSecret(bc.text, nil)
			}
		})
	}
}

func BenchmarkRedactorKnown(b *testing.B) {
	known := []string{"sk-live-0a1b2c3d4e5f", "hunter2hunter2", "ghp_0123456789abcdefghij", "correct-horse-battery", "AKIAIOSFODNN7EXAMPLE"}
	text := benchText(1<<20) + " and hunter2hunter2"
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		_ = Text(text, known, 0)
	}
}
