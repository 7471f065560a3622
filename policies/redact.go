package policies

import (
	"regexp"
	"strings"
)

// secretPatterns match credentials that providers and tools echo in messages.
var secretPatterns = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{6,}`), "$1 [REDACTED]"},
	{regexp.MustCompile(`(?i)\b(sk-ant|xai|gsk|ghp|gho|github_pat|xox[abpr])[-_][A-Za-z0-9_\-]{6,}`), "$1-[REDACTED]"},
	{regexp.MustCompile(`(?i)\b(sk|rk|pk)-[A-Za-z0-9_\-*]{6,}`), "$1-[REDACTED]"},
	{regexp.MustCompile(`\bAIza[0-9A-Za-z_\-]{20,}`), "[REDACTED]"},
	{regexp.MustCompile(`(?i)\b(api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|authorization|x-api-key)(["']?\s*[:=]\s*["']?)([^\s"'&,;}]{4,})`), "$1$2[REDACTED]"},
}

// Redact replaces API keys, bearer tokens and other credentials in s with
// [REDACTED]. retrace runs every message it puts on a span, in a diagnosis or
// in a result for the model through it.
func Redact(s string) string {
	if !mayHoldSecret(s) {
		return s
	}
	for _, p := range secretPatterns {
		if p.re.MatchString(s) {
			s = p.re.ReplaceAllString(s, p.with)
		}
	}
	return s
}

// secretHints are the words every secret pattern starts with or contains,
// in lower case: a message with none of them needs no regular expression.
var secretHints = []string{"sk-", "rk-", "pk-", "bearer", "basic", "aiza", "xai", "gsk", "gh", "github_pat", "xox",
	"key", "token", "secret", "password", "authorization"}

// hintPairs marks, for each first letter of a hint, the second letters that
// follow it: a bit per letter, and bit 26 for '-'.
var hintPairs = func() (t [256]uint32) {
	for _, h := range secretHints {
		t[h[0]] |= 1 << letter(h[1])
	}
	return t
}()

func letter(c byte) uint {
	if c >= 'a' && c <= 'z' {
		return uint(c - 'a')
	}
	if c == '-' {
		return 26
	}
	return 27
}

// mayHoldSecret scans s once for the first two letters of a hint and
// compares the hint there, ignoring case.
func mayHoldSecret(s string) bool {
	for i := 0; i+1 < len(s); i++ {
		pairs := hintPairs[s[i]|0x20]
		if pairs == 0 || pairs&(1<<letter(s[i+1]|0x20)) == 0 {
			continue
		}
		for _, h := range secretHints {
			if len(s)-i >= len(h) && strings.EqualFold(s[i:i+len(h)], h) {
				return true
			}
		}
	}
	return false
}
