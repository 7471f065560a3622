package redact

// A rule is one secret pattern: its name, where it may start (the byte
// before the position and the byte at it), and how it matches there, the
// scanner's method that step calls for it. step tries at a position the
// rules that may start there, in the order of the table: the first that
// matches replaces what it found, and the scan goes on where it says.
//
// Where a rule may start is read off tables built from the rules' after,
// at and pairs, a load each per position, and skip jumps over the
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

// The rules, in the order step tries them at a position. Where two match
// there, the first wins: a key's prefix goes before an opaque token, which
// would take the prefix along ("sk-[REDACTED]", not "[REDACTED]"), as the
// tests' expectations hold it.
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

// startAfter and startAt mark, for each byte, the rules (bit r for rules[r])
// that may start after it and at it; startWith[c][foldIndex[d]], those that
// may start at c before d (a rule without pairs before any byte), and
// startAtEnd, those that may start at the text's last byte.
var startAfter, startAt, startWith, startAtEnd = func() (after, at [256]uint16, with [256][29]uint16, end uint16) {
	for r, rl := range rules {
		bit := uint16(1) << r
		if rl.pairs == nil {
			end |= bit
		}
		for b := range 256 {
			if rl.after(byte(b)) {
				after[b] |= bit
			}
			if rl.at(byte(b)) && (rl.pairs == nil || rl.pairs[b] != 0) {
				at[b] |= bit
			}
			for f := range with[b] {
				if rl.pairs == nil || rl.pairs[b]&(1<<f) != 0 {
					with[b][f] |= bit
				}
			}
		}
	}
	return after, at, with, end
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
// returns where to go on. Each rule's matcher is called by a test of its bit
// (TestStepTriesTheRulesInTheTablesOrder keeps the tests in the order of
// the table), not through a function in the table: a call through a
// function value would make the scanner escape to the heap, and every scan
// allocate; and a loop over the bits with a switch costs a scan of short
// words 15% more than a test of each bit in turn.
func (sc *scanner) step(i int) int {
	s := sc.s
	c, p := s[i], sc.prev(i)
	if charClass[c]&cToken != 0 && charClass[p]&cToken == 0 {
		sc.path = c == '/' || p == '@'
	}
	m := startAt[c] & startAfter[p]
	if m == 0 {
		return sc.skip(i + 1)
	}
	if i+1 < len(s) {
		m &= startWith[c][foldIndex[s[i+1]]]
	} else {
		m &= startAtEnd
	}
	if m&(1<<ruleURL) != 0 && (p != ']' || sc.redactedBefore(i, p)) {
		return sc.url(i)
	}
	if m&(1<<ruleParam) != 0 {
		if j := sc.param(i); j >= 0 {
			return j
		}
	}
	if m&(1<<ruleAssignment) != 0 {
		if j := sc.assignment(i, p); j >= 0 {
			return j
		}
	}
	if m&(1<<ruleScheme) != 0 {
		if j := sc.bearer(i); j >= 0 {
			return j
		}
	}
	if m&(1<<ruleCookie) != 0 {
		if j := sc.cookie(i); j >= 0 {
			return j
		}
	}
	if m&(1<<ruleTokenWord) != 0 {
		if j := sc.afterWord(i); j >= 0 {
			return j
		}
	}
	if m&(1<<ruleKey) != 0 {
		if j := sc.key(i, charClass[p]&cWord != 0); j >= 0 {
			return j
		}
	}
	if m&(1<<ruleOpaque) != 0 && (p != '/' || sc.path) {
		if j := sc.opaque(i); j >= 0 {
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
