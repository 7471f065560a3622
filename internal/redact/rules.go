package redact

import "math/bits"

// A rule is one secret pattern: its name, where it may start (the byte
// before the position and the byte at it), and how it matches there, the
// scanner's method that match calls for it. step tries at a position the
// rules that may start there, in the order of the table: the first that
// matches replaces what it found, and the scan goes on where it says.
//
// Where a rule may start is read off two tables built from the rules'
// after and at, one load each per position, and skip jumps over the
// positions where none may: a rule's start is data, its matcher code.
type rule struct {
	name string
	// after reports whether the rule may start after byte p: the byte before
	// in the output, ']' after a replacement, ' ' at the start of the text,
	// so that a second scan decides the same.
	after func(p byte) bool
	// at reports whether the rule may start at byte c.
	at func(c byte) bool
	// pairs, when set, marks for each first byte the second bytes that may
	// follow it, folded by foldIndex: the first two letters of the names or
	// prefixes the rule looks for.
	pairs *[256]uint32
}

// The rules, in the order step tries them at a position. A name read where
// the value it names starts (a query parameter, an assignment) goes before
// the rules that would read the value on its own; a key's prefix before an
// opaque token, which would take the prefix along.
const (
	ruleURL = iota
	ruleParam
	ruleAssignment
	ruleScheme
	ruleCookie
	ruleTokenWord
	ruleKey
	ruleOpaque
	numRules
)

// rules is the table of secret patterns (what each finds is its matcher's
// doc, and policies.Redact's for users).
var rules = [numRules]rule{
	// "://" after a scheme: the password of a URL's userinfo, or a user name
	// that is a token (url). It also limits the other rules to the
	// authority, then judges the path part by part.
	ruleURL: {name: "url", at: byteIn(":"), after: func(p byte) bool {
		return charClass[p]&(cAlpha|cDigit) != 0 || p == ']' // a scheme redacted as a bearer token still starts a URL
	}},
	// The value of a query or fragment parameter whose name is a secret's
	// (param).
	ruleParam: {name: "query parameter", after: byteIn("?&#"), at: inClass(cParamName)},
	// A secret's name, ':' or '=', and its value (assignment); also at the
	// end of a snake_case name.
	ruleAssignment: {name: "assignment", after: func(p byte) bool { return charClass[p]&cWord == 0 || p == '_' },
		at: inClass(cToken), pairs: &namePairs},
	// "Bearer" or "Basic" and the token after it (bearer).
	ruleScheme: {name: "scheme", after: notInClass(cWord), at: byteIn("bB")},
	// A Cookie or Set-Cookie header and its values (cookie).
	ruleCookie: {name: "cookie header", after: notInClass(cWord), at: byteIn("cC")},
	// token, credential(s) or bearer, and the token after it (afterWord).
	ruleTokenWord: {name: "token after its word", after: notInClass(cWord), at: byteIn("tTcCbB")},
	// A provider's key prefix and the key after it, glued to a word or not
	// (key).
	ruleKey: {name: "provider key", after: func(byte) bool { return true }, at: inClass(cToken), pairs: &keyPairs},
	// An opaque token of letters and digits, or a part of a path judged as
	// one (opaque).
	ruleOpaque: {name: "opaque token", after: func(p byte) bool { return charClass[p]&cToken == 0 || p == '/' },
		at: func(c byte) bool { return charClass[c]&cToken != 0 && c != '/' }},
}

// match tries rule r at i, p the byte before it, and returns where the scan
// goes on, or -1 when it does not match. A switch, not a function in the
// table: a call through a function value would make the scanner escape to
// the heap, and the scan allocate when there is nothing to redact.
func (sc *scanner) match(r, i int, p byte) int {
	switch r {
	case ruleURL:
		if p == ']' && !sc.redactedBefore(i, p) {
			return -1
		}
		return sc.url(i)
	case ruleParam:
		return sc.param(i)
	case ruleAssignment:
		return sc.assignment(i, p)
	case ruleScheme:
		return sc.bearer(i)
	case ruleCookie:
		return sc.cookie(i)
	case ruleTokenWord:
		return sc.afterWord(i)
	case ruleKey:
		return sc.key(i, charClass[p]&cWord != 0)
	case ruleOpaque:
		if p == '/' && !sc.path {
			return -1 // after '/' only as a part of a path
		}
		return sc.opaque(i)
	}
	return -1
}

// startAfter and startAt mark, for each byte, the rules (bit r for rules[r])
// that may start after it and at it.
var startAfter, startAt = func() (after, at [256]uint16) {
	for r, rl := range rules {
		for b := range 256 {
			if rl.after(byte(b)) {
				after[b] |= 1 << r
			}
			if rl.at(byte(b)) && (rl.pairs == nil || rl.pairs[b] != 0) {
				at[b] |= 1 << r
			}
		}
	}
	return after, at
}()

func byteIn(set string) func(byte) bool {
	return func(c byte) bool {
		for i := 0; i < len(set); i++ {
			if set[i] == c {
				return true
			}
		}
		return false
	}
}

func inClass(class uint16) func(byte) bool {
	return func(c byte) bool { return charClass[c]&class != 0 }
}

func notInClass(class uint16) func(byte) bool {
	return func(c byte) bool { return charClass[c]&class == 0 }
}

// step tries the rules that may start at i, in the table's order, and
// returns where to go on.
func (sc *scanner) step(i int) int {
	s := sc.s
	c, p := s[i], sc.prev(i)
	if charClass[c]&cToken != 0 && charClass[p]&cToken == 0 {
		sc.path = c == '/' || p == '@'
	}
	for m := startAt[c] & startAfter[p]; m != 0; m &= m - 1 {
		r := bits.TrailingZeros16(m)
		if pairs := rules[r].pairs; pairs != nil && (i+1 >= len(s) || pairs[c]&(1<<foldIndex[s[i+1]]) == 0) {
			continue
		}
		if j := sc.match(r, i, p); j >= 0 {
			return j
		}
	}
	return sc.skip(i + 1)
}

// skip returns the first position from j, past the last replacement, where
// a rule may start: a URL's ':', a token character after anything but a
// letter or digit, or, after one, a key prefix. It stops at every start of
// a run of token characters too, where step notes whether the run is a
// path. TestSkipStopsWhereARuleMayStart holds it to the table: it stops
// at least wherever step would try a rule, and looks at a byte once.
func (sc *scanner) skip(j int) int {
	s := sc.s
	for pk := charClass[s[j-1]]; j < len(s); j++ {
		c := s[j]
		k := charClass[c]
		switch {
		case k&cToken == 0:
			if c == ':' {
				return j
			}
		case pk&(cAlpha|cDigit) == 0:
			return j
		case k&cKeyStart != 0 && j+1 < len(s) && keyPairs[c]&(1<<foldIndex[s[j+1]]) != 0:
			return j
		}
		pk = k
	}
	return j
}
