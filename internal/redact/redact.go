package redact

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/retrace-go/retrace/internal/engine"
)

// Redacted replaces every secret.
const Redacted = "[REDACTED]"

// Text is s as retrace writes it: the known values replaced by exact value,
// then the secret patterns (see rules), cut to at most limit bytes at a
// character boundary when limit > 0, the cut marked as engine.Truncate marks
// it (the caps are engine's Cap constants, by sink). The cut comes last: a
// cut first could halve a secret, and the half left would match neither its
// value nor a pattern.
//
// It returns s itself, without allocating, when there is nothing to redact
// and nothing to cut; a second Text changes nothing the patterns wrote.
func Text(s string, known []string, limit int) string {
	s = patterns(Known(s, known))
	if limit > 0 {
		s = engine.Truncate(s, limit)
	}
	return s
}

// Value is an identifier a provider or a server gave (a model's name, a
// response's ID) as retrace keeps it: itself, or [Redacted] whole when Text
// would change it, for the rest of a value that held a secret names
// nothing.
func Value(v string, known []string) string {
	if IsSecret(v, known) {
		return Redacted
	}
	return v
}

// IsSecret reports whether Text (uncapped) would change s: whether s holds a
// known value or a pattern matches, with a replacement that is not the same
// bytes (a value "[REDACTED]" after "password=" is replaced by itself). It
// builds no string, and allocates nothing, unless a known value is in s:
// then it scans what Known made of s, as the patterns can give back what
// the known values changed ("password=[REDACTED]" with a known value
// "REDACTED" becomes "password=[[REDACTED]]", then itself again).
func IsSecret(s string, known []string) bool {
	if t := Known(s, known); t != s {
		return patterns(t) != s
	}
	sc := scanner{in: s, s: s, last: -1, colon: -1, stop: -1, check: true}
	sc.run()
	return sc.changed()
}

// HasKnown reports whether Known would change s, without building a string
// unless a known value in s holds a '['. Known replaces each run of
// overlapping known values with [Redacted], and only a run that starts with
// '[', the first byte of [Redacted], can be replaced by the same bytes: when
// no known value in s holds one, the first run puts a '[' where s has
// another byte.
func HasKnown(s string, known []string) bool {
	found, bracket := false, false
	for _, k := range known {
		if len(k) >= engine.MinSecretLen && strings.Contains(s, k) {
			found, bracket = true, bracket || strings.IndexByte(k, '[') >= 0
		}
	}
	if bracket {
		return Known(s, known) != s
	}
	return found
}

// Known replaces every occurrence of each known value in s (one of
// engine.MinSecretLen bytes or more; a shorter one is no credential) with
// [Redacted], and nothing else: for text whose patterns are redacted where
// it is written (an *APIError's fields, which its Error redacts), or that
// retrace worded itself from such fields. Overlapping occurrences of
// different values become one [Redacted], so that no part of either is
// left. It runs strings.Index once per occurrence of each value: O(n·k) for
// k values, and k is a handful of configured keys.
func Known(s string, known []string) string {
	type span struct{ from, to int }
	var spans []span
	for _, k := range known {
		if len(k) < engine.MinSecretLen {
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
		b.WriteString(Redacted)
		w = to
	}
	b.WriteString(s[w:])
	return b.String()
}

// Memo is Text without known values, for one sink that writes the same
// text again and again (the span statuses of a layer whose provider is
// down, each call failing on the same words): it remembers the last text it
// redacted, and gives that text's redaction back without scanning it again.
// Text is a function of its arguments alone, so a remembered answer is the
// answer. Safe for concurrent use; the zero Memo is ready.
type Memo struct{ last atomic.Pointer[memoed] }

type memoed struct {
	in    string
	limit int
	out   string
}

// Text is Text(s, nil, limit), remembered.
func (m *Memo) Text(s string, limit int) string {
	if l := m.last.Load(); l != nil && l.limit == limit && l.in == s {
		return l.out
	}
	out := Text(s, nil, limit)
	m.last.Store(&memoed{in: s, limit: limit, out: out})
	return out
}
