package policies

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// matchTransient finds the leftmost phrase in msg that marks a failure as
// transient and returns it in lower case, or "" when there is none. It matches
// what the regular expression
//
//	(?i)overloaded|rate.?limit|\b429\b|\b5\d\d\b|service.?unavailable|connection.?(error|refused)|other side closed|fetch failed|reset before headers|terminated
//
// finds with FindString, lower-cased by strings.ToLower, in time linear in
// len(msg). The alternatives start with different letters or differ in the
// second ("overloaded"/"other", "rate"/"reset"), so at most one of them can
// match at a position and the leftmost match is the first position where one
// does. "(?i)" folds letters as Go's regexp package does: ASCII case, and the
// long s "ſ" (U+017F), whose case-fold orbit contains 's'; no other
// non-ASCII rune folds to a letter of these phrases. ".?" is one optional
// character other than a newline: a whole UTF-8 sequence, or one byte of
// invalid UTF-8. "\b" is an ASCII word boundary.
//
// It allocates only when the match holds a non-ASCII rune that lower-casing
// changes; otherwise it returns a part of msg or a string from transientLower.
func matchTransient(msg string) string {
	for i := 0; i < len(msg); i++ {
		n := -1
		rest := msg[i:]
		switch msg[i] {
		case 'o', 'O':
			if n = foldPrefix(rest, "overloaded"); n < 0 {
				n = foldPrefix(rest, "other side closed")
			}
		case 'r', 'R':
			if n = gapPrefix(rest, "rate", "limit", ""); n < 0 {
				n = foldPrefix(rest, "reset before headers")
			}
		case 's', 'S', 0xc5: // 0xc5 0xbf is "ſ"
			n = gapPrefix(rest, "service", "unavailable", "")
		case 'c', 'C':
			n = gapPrefix(rest, "connection", "error", "refused")
		case 'f', 'F':
			n = foldPrefix(rest, "fetch failed")
		case 't', 'T':
			n = foldPrefix(rest, "terminated")
		case '4':
			if strings.HasPrefix(rest, "429") {
				n = 3
			}
		case '5':
			if len(rest) >= 3 && isDigit(rest[1]) && isDigit(rest[2]) {
				n = 3
			}
		}
		if n < 0 {
			continue
		}
		if (msg[i] == '4' || msg[i] == '5') && !wordBoundaries(msg, i, i+n) {
			continue
		}
		return lowerMatch(msg[i : i+n])
	}
	return ""
}

// foldPrefix returns how many bytes of s spell lit, a lower-case ASCII
// phrase, ignoring case as (?i) does, or -1 when s does not start with it.
func foldPrefix(s, lit string) int {
	n := 0
	for j := 0; j < len(lit); j++ {
		if n >= len(s) {
			return -1
		}
		c := s[n]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		switch {
		case c == lit[j]:
			n++
		case lit[j] == 's' && strings.HasPrefix(s[n:], "ſ"):
			n += len("ſ")
		default:
			return -1
		}
	}
	return n
}

// gapPrefix matches head, one optional character other than '\n', then tail
// or, when it is not empty, alt: the regexp head.?(tail|alt). The optional
// character is tried first, as the greedy ".?" does.
func gapPrefix(s, head, tail, alt string) int {
	h := foldPrefix(s, head)
	if h < 0 {
		return -1
	}
	ends := func(at int) int {
		if t := foldPrefix(s[at:], tail); t >= 0 {
			return at + t
		}
		if alt != "" {
			if t := foldPrefix(s[at:], alt); t >= 0 {
				return at + t
			}
		}
		return -1
	}
	if h < len(s) {
		if r, w := utf8.DecodeRuneInString(s[h:]); r != '\n' {
			if n := ends(h + w); n >= 0 {
				return n
			}
		}
	}
	return ends(h)
}

// wordBoundaries reports whether msg[i:j] has \b on both sides.
func wordBoundaries(msg string, i, j int) bool {
	return (i == 0 || !isWordByte(msg[i-1])) && (j == len(msg) || !isWordByte(msg[j]))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isWordByte reports whether c is an ASCII word character, [0-9A-Za-z_]. A
// byte of a multi-byte rune is not, just as the rune is not.
func isWordByte(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
}

// lowerMatch returns strings.ToLower(m) for a match of matchTransient without
// allocating for ASCII: m itself when it has no capitals, else the interned
// lower-case spelling.
func lowerMatch(m string) string {
	var buf [32]byte
	upper := false
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c >= utf8.RuneSelf || i >= len(buf) {
			return strings.ToLower(m)
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
			upper = true
		}
		buf[i] = c
	}
	if !upper {
		return m
	}
	if l, ok := transientLower[string(buf[:len(m)])]; ok {
		return l
	}
	return strings.ToLower(m)
}

// transientLower holds every lower-case ASCII text matchTransient can match
// that contains a letter, so that a match with capitals needs no allocation.
// It is built once and only read.
var transientLower = func() map[string]string {
	m := make(map[string]string)
	add := func(s string) { m[s] = s }
	for _, s := range []string{"overloaded", "other side closed", "reset before headers", "fetch failed", "terminated"} {
		add(s)
	}
	for _, g := range [][2]string{{"rate", "limit"}, {"service", "unavailable"}, {"connection", "error"}, {"connection", "refused"}} {
		add(g[0] + g[1])
		for c := 0; c < utf8.RuneSelf; c++ {
			if c != '\n' {
				add(strings.ToLower(g[0] + string(rune(c)) + g[1]))
			}
		}
	}
	return m
}()

// patternReasons holds "pattern: " and each text of transientLower, of 429
// and of every 5xx status, made once: the reason of a failure classified by
// its words is written on every attempt of every layer, and would otherwise
// be a new string each time.
var patternReasons = func() map[string]string {
	m := make(map[string]string, len(transientLower)+101)
	for s := range transientLower {
		m[s] = "pattern: " + s
	}
	for code := 500; code < 600; code++ {
		s := statusText(code)
		m[s] = "pattern: " + s
	}
	m["429"] = "pattern: 429"
	return m
}()

// patternStatus is the reason of each three-digit status matched, by its
// number: "pattern: 503".
var patternStatus = func() (r [1000]string) {
	for code := range r {
		r[code] = "pattern: " + strconv.Itoa(code)
	}
	return r
}()

// patternReason is the reason a failure matched by matchTransient's m is
// given.
func patternReason(m string) string {
	if len(m) == 3 && isDigit(m[0]) && isDigit(m[1]) && isDigit(m[2]) {
		// A status, the most common match: its reason by index, not by hash.
		return patternStatus[int(m[0]-'0')*100+int(m[1]-'0')*10+int(m[2]-'0')]
	}
	if r, ok := patternReasons[m]; ok {
		return r
	}
	return "pattern: " + m
}
