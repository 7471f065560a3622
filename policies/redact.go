package policies

import "regexp"

// secretPatterns match credentials that providers and tools echo in messages.
var secretPatterns = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{6,}`), "$1 [REDACTED]"},
	{regexp.MustCompile(`\b(sk-ant|xai|gsk|ghp|gho|github_pat|xox[abpr])[-_][A-Za-z0-9_\-]{6,}`), "$1-[REDACTED]"},
	{regexp.MustCompile(`\b(sk|rk|pk)-[A-Za-z0-9_\-*]{6,}`), "$1-[REDACTED]"},
	{regexp.MustCompile(`\bAIza[0-9A-Za-z_\-]{20,}`), "[REDACTED]"},
	{regexp.MustCompile(`(?i)\b(api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|authorization|x-api-key)(["']?\s*[:=]\s*["']?)([^\s"'&,;}]{4,})`), "$1$2[REDACTED]"},
}

// Redact replaces API keys, bearer tokens and other credentials in s with
// [REDACTED]. retrace runs every message it puts on a span, in a diagnosis or
// in a result for the model through it.
func Redact(s string) string {
	for _, p := range secretPatterns {
		if p.re.MatchString(s) {
			s = p.re.ReplaceAllString(s, p.with)
		}
	}
	return s
}
