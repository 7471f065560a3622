package engine

import (
	"context"
	"slices"
	"strings"
)

// MinSecretLen is the shortest value redacted by exact value: a shorter one
// ("test", "1234") would wreck ordinary text, and is no credential worth the
// name.
const MinSecretLen = 8

type secretsKey struct{}

// WithSecrets returns a context whose text, wherever retrace writes it,
// has values (and those of the contexts above) redacted by exact value.
func WithSecrets(ctx context.Context, values ...string) context.Context {
	prev := SecretsFrom(ctx)
	all := make([]string, 0, len(prev)+len(values))
	all = append(all, prev...)
	for _, v := range values {
		if len(v) >= MinSecretLen && !contains(all, v) {
			all = append(all, v)
		}
	}
	if len(all) == len(prev) {
		return ctx
	}
	return context.WithValue(ctx, secretsKey{}, all)
}

// SecretsFrom returns the context's known secrets.
func SecretsFrom(ctx context.Context) []string {
	if ctx == nil {
		return nil
	}
	s, _ := ctx.Value(secretsKey{}).([]string)
	return s
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// RedactKnown replaces every occurrence of each known secret in s with
// [REDACTED]; overlapping occurrences of different values become one
// [REDACTED], so that no part of either is left. It runs strings.Index once
// per occurrence of each value: O(n·k) for k values, and k is a handful of
// configured keys.
func RedactKnown(s string, known []string) string {
	type span struct{ from, to int }
	var spans []span
	for _, k := range known {
		if len(k) < MinSecretLen {
			continue
		}
		for off := 0; ; {
			j := strings.Index(s[off:], k)
			if j < 0 {
				break
			}
			spans = append(spans, span{off + j, off + j + len(k)})
			off += j + len(k)
		}
	}
	if len(spans) == 0 {
		return s
	}
	slices.SortFunc(spans, func(a, b span) int { return a.from - b.from })
	var b strings.Builder
	b.Grow(len(s))
	w := 0
	for i := 0; i < len(spans); {
		from, to := spans[i].from, spans[i].to
		for i++; i < len(spans) && spans[i].from <= to; i++ {
			to = max(to, spans[i].to)
		}
		b.WriteString(s[w:from])
		b.WriteString("[REDACTED]")
		w = to
	}
	b.WriteString(s[w:])
	return b.String()
}
