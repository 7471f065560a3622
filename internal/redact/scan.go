package redact

import "strings"

// Character charClass of ASCII bytes; bytes of multi-byte runes have none.
const (
	cWord      = 1 << iota // [A-Za-z0-9_]: a \b word character
	cAlpha                 // [A-Za-z]
	cDigit                 // [0-9]
	cToken                 // [A-Za-z0-9._~+/*_-]: a character of a token
	cPart                  // the same but '/': a character of a part of a path
	cKey                   // [A-Za-z0-9_*-]: a character of a key after its prefix
	cSpace                 // [\t\n\f\r ]: \s
	cValueEnd              // \s " ' & , ; }: ends a secret's value
	cQueryEnd              // \s " ' & # < > , ; }: ends a query parameter's value
	cHostEnd               // \s / ? # " ' < > \ `: ends a URL's authority
	cParamName             // [A-Za-z0-9_.-]: a character of a query parameter's name
	cKeyStart              // the first character of a key prefix, in either case
	cCookieEnd             // \s " , ; \: ends a cookie's value
)

var charClass = func() (t [256]uint16) {
	set := func(chars string, c uint16) {
		for i := 0; i < len(chars); i++ {
			t[chars[i]] |= c
		}
	}
	const (
		lower  = "abcdefghijklmnopqrstuvwxyz"
		upper  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		digits = "0123456789"
		alnum  = lower + upper + digits
	)
	set(lower+upper, cAlpha)
	set(digits, cDigit)
	set(alnum+"_", cWord)
	set(alnum+"._~+/*-_", cToken)
	set(alnum+"._~+*-_", cPart)
	set(alnum+"_*-", cKey)
	set("\t\n\f\r ", cSpace|cValueEnd|cQueryEnd|cHostEnd)
	// What ends a secret's value ends a parameter's too: a parameter never
	// reads on past where an assignment at the same place stopped.
	set(`"'&,;}`, cValueEnd|cQueryEnd)
	set("#<>", cQueryEnd)
	set("/?#\"'<>\\`", cHostEnd)
	set(alnum+"_.-", cParamName)
	set("\t\n\f\r \",;\\", cCookieEnd)
	for _, kp := range keyPrefixes {
		set(kp.text[:1], cKeyStart)
		if !kp.exact {
			set(strings.ToUpper(kp.text[:1]), cKeyStart)
		}
	}
	return t
}()

// patterns returns s with the secret patterns redacted (see rules).
//
// It scans s once, left to right, trying at each position only the rules
// that can start there; caches of what it learnt about the current token and
// key spare it rereading them, so it looks at each byte a bounded number of
// times and runs in time linear in len(s). It returns s itself, without
// allocating, when there is nothing to redact, and patterns(patterns(s)) ==
// patterns(s): rules look back at the output, where a replacement ends in
// ']', not at the input.
func patterns(s string) string {
	sc := scanner{in: s, s: s, last: -1, colon: -1, stop: -1}
	sc.run()
	return sc.finish()
}

// scanner is the state of one scan of a text.
type scanner struct {
	in   string          // the whole text
	s    string          // in[:limit]: no rule looks past it
	out  strings.Builder // the redacted text, once something was redacted
	w    int             // in[w:i] is still to be copied to out
	last int             // where the last replacement ended, or -1

	// path reports that the current run of token characters began with '/'
	// or after '@': a path or a host, judged part by part.
	path bool

	// Two caches keep the scan linear. tokEnd: a token starting before it is
	// a part of one already found not opaque, and so is not opaque either
	// (found in path mode when tokPath, where parts end at '/'). keyStart,
	// keyEnd: a run of key characters; a key starting at k in it has a random
	// run of letters and digits when k <= keyRandom.
	tokEnd           int
	tokPath          bool
	keyStart, keyEnd int
	keyRandom        int

	// A URL's authority in[…:stop] and, when it has a userinfo, the '@'
	// ending it and the ':' before its password, or the '@' again when it
	// has none; -1 when none. The scan of each part stops at its end, so that
	// no rule crosses it and a second scan sees the same parts.
	colon, at, stop int

	// in[urlFrom:urlTo] is the path of the last URL, its token characters
	// after the authority, where a part is judged more strictly than in
	// text. A second scan finds a path cut at the first [REDACTED], and
	// judges the parts after it as text: what the strict rule kept, the
	// other keeps too.
	urlFrom, urlTo int

	// noPair: a cookie's name read from before it runs to it without '=',
	// as any read from later in that run would.
	noPair int

	// A scan that checks (IsSecret) writes no output: it follows the output
	// it would write, n bytes of it so far, and stops at the first byte
	// where that differs from the input, the answer.
	check   bool
	n       int
	differs bool
}

// prev returns the character before position i in the output: a replacement
// ends in ']'. Rules look back at the output, not the input, so that running
// the scan again decides the same.
func (sc *scanner) prev(i int) byte {
	switch {
	case i == sc.last:
		return ']'
	case i == 0:
		return ' '
	}
	return sc.in[i-1]
}

// run scans the text to its end, or a check to the first difference.
func (sc *scanner) run() {
	i := 0
	for !sc.differs {
		if i < len(sc.s) {
			i = sc.step(i)
			continue
		}
		var more bool
		if i, more = sc.resume(i); !more {
			return
		}
	}
}

// resume lifts the innermost limit at i, its end: after a user name the
// password is redacted and the scan goes on to the '@'; after an authority,
// to the rest of the text. It reports false at the end of the text.
func (sc *scanner) resume(i int) (int, bool) {
	switch {
	case sc.colon >= 0:
		if sc.colon < sc.at {
			sc.replace(sc.colon+1, sc.at, Redacted)
		}
		i, sc.colon = sc.at, -1
		sc.s = sc.in[:sc.stop]
		return i, true
	case sc.stop >= 0:
		sc.s, sc.stop = sc.in, -1
		if i < len(sc.in) && sc.in[i] == '/' {
			e := i
			for e < len(sc.in) && charClass[sc.in[e]]&cToken != 0 {
				e++
			}
			// The path is judged part by part, also after a port, where the
			// run of token characters began.
			sc.urlFrom, sc.urlTo, sc.path = i, e, true
		}
		return i, true
	}
	return i, false
}

// replaceName replaces in[from:to] like replace, where in[name:to] is the
// token replaced, and returns where the scan goes on. When that token is a
// secret's name (a bearer "token", a key or opaque token ending in
// "_api_key"), ends in ':' (a value "OPENAI_API_KEY:" after "password:")
// or is a secret's name and '=' (a value "secret=" cut at the quote before
// its own value), a value assigned to it follows, which would otherwise have
// lost the name that marks it: that is replaced too, and so on along a
// chain. So are the cookies after a header's name and the token after its
// word ("password: Cookie: sid=…", "secret: credential tok_…").
func (sc *scanner) replaceName(from, to int, with string, name int) int {
	for {
		sc.replace(from, to, with)
		tok := sc.in[name:to]
		if j := sc.named(tok, to); j >= 0 {
			return j
		}
		v := -1
		var e int
		switch {
		case strings.HasSuffix(tok, ":"), strings.HasSuffix(tok, "=") && secretParam(tok[:len(tok)-1]):
			v, e = sc.valueAt(to - 1)
		case secretParam(tok):
			v, e = sc.valueAt(to)
		}
		if v < 0 {
			return to
		}
		if j := sc.cookieValue(v); j >= 0 {
			return j
		}
		from, to, with, name = v, e, Redacted, v
	}
}

// replace copies the text up to from and writes with instead of in[from:to].
func (sc *scanner) replace(from, to int, with string) {
	if sc.check {
		sc.follow(sc.in[sc.w:from], true)
		sc.follow(with, false)
		sc.w, sc.last = to, to
		return
	}
	if sc.out.Cap() == 0 {
		sc.out.Grow(len(sc.in) + len(with))
	}
	sc.out.WriteString(sc.in[sc.w:from])
	sc.out.WriteString(with)
	sc.w, sc.last = to, to
}

// follow adds p to the output a check follows, noting whether it differs
// from the input there. A piece copied from in[w:] is the input's own bytes
// while no replacement changed the output's length (n == w).
func (sc *scanner) follow(p string, copied bool) {
	switch {
	case sc.differs, copied && sc.n == sc.w:
	case len(sc.in)-sc.n < len(p) || sc.in[sc.n:sc.n+len(p)] != p:
		sc.differs = true
	}
	sc.n += len(p)
}

// changed reports whether a check found that the scan changes the input:
// a byte of the output differs, or the rest, in[w:], lands elsewhere.
func (sc *scanner) changed() bool {
	return sc.differs || sc.n != sc.w
}

func (sc *scanner) finish() string {
	if sc.out.Cap() == 0 {
		return sc.in
	}
	sc.out.WriteString(sc.in[sc.w:])
	return sc.out.String()
}

// url handles "://" at i: it limits the scan to the authority and, for a
// userinfo, to the user name, or redacts a user name that is a token.
func (sc *scanner) url(i int) int {
	s := sc.s
	if !strings.HasPrefix(s[i+1:], "//") {
		return i + 1
	}
	a := i + 3
	stop, at := a, -1
	for ; stop < len(s) && charClass[s[stop]]&cHostEnd == 0; stop++ {
		if s[stop] == '@' {
			at = stop // the last '@' ends the userinfo, as browsers read it
		}
	}
	sc.s, sc.stop = sc.in[:stop], stop
	if at < 0 {
		return i + 1
	}
	user := s[a:at]
	if len(user) >= 16 && hasLetterAndDigit(user) && allOf(user, cToken) {
		sc.replace(a, at, Redacted)
		return at
	}
	// The scan stops before the password, or before the '@' when there is
	// none, so that no rule takes the '@' along and moves the userinfo.
	sc.colon, sc.at = at, at
	if c := strings.IndexByte(user, ':'); c >= 0 && a+c+1 < at {
		sc.colon = a + c
	}
	sc.s = sc.in[:sc.colon]
	return i + 1
}

// redactedBefore reports whether [REDACTED] ends at i: a scheme redacted
// as a bearer token can still start a URL.
func (sc *scanner) redactedBefore(i int, p byte) bool {
	return p == ']' && (i == sc.last || strings.HasSuffix(sc.in[:i], Redacted))
}

// param redacts the value of a secret query parameter named at i.
func (sc *scanner) param(i int) int {
	s := sc.s
	j := i
	for j < len(s) && charClass[s[j]]&cParamName != 0 {
		j++
	}
	if j >= len(s) || s[j] != '=' || !secretParam(s[i:j]) {
		return -1
	}
	v := j + 1
	e := valueEnd(s, v, cQueryEnd)
	if e == v {
		return -1
	}
	sc.replace(v, e, Redacted)
	return e
}

// valueEnd returns where a value that starts at v ends: at a character of the
// class end, except inside a URL's authority, which the value takes whole.
// A value "https://u:p,w@host" would otherwise stop inside the password, at
// ',', and leave its end, which the url rule would not see either.
func valueEnd(s string, v int, end uint16) int {
	e := v
	for e < len(s) && charClass[s[e]]&end == 0 {
		if s[e] == ':' && strings.HasPrefix(s[e:], "://") {
			e += len("://")
			for e < len(s) && charClass[s[e]]&cHostEnd == 0 {
				e++
			}
			continue
		}
		e++
	}
	return e
}

// secretParam reports whether a query parameter, or a field, of that name
// holds a secret: the name, or its last part after '_' or '-', is one of
// secretWords, or the whole name is "sig" or "code".
func secretParam(name string) bool {
	i := len(name)
	for i > 0 && name[i-1] != '_' && name[i-1] != '-' {
		if i--; len(name)-i > len("authorization") {
			return false // longer than any of the words
		}
	}
	part := name[i:]
	for _, w := range secretWords {
		if len(part) == len(w) && strings.EqualFold(part, w) {
			return true
		}
	}
	return i == 0 && (strings.EqualFold(name, "sig") || strings.EqualFold(name, "code"))
}

// secretWords name secrets, alone or as the last part of a name.
var secretWords = [...]string{"key", "apikey", "token", "signature", "secret", "password", "passwd", "pwd",
	"authorization", "auth", "session", "credential", "credentials", "jwt"}

// assignment redacts the value given to a secret's name at i.
//
// The end of a longer name ("OPENAI_API_KEY", "secret_key") needs '=' or a
// quoted name: an error code followed by its message, as in
// "invalid_api_key: Incorrect API key provided", is no assignment.
func (sc *scanner) assignment(i int, p byte) int {
	s := sc.s
	n := secretName(s[i:], p)
	if n == 0 {
		return -1
	}
	if j := i + n; p == '_' || n == len("key") { // only "key" is that short
		quoted := j < len(s) && (s[j] == '"' || s[j] == '\'')
		if k := skipSpace(s, j); !quoted && (k >= len(s) || s[k] != '=') {
			return -1
		}
	}
	return sc.value(i + n)
}

// value redacts the value of an assignment whose name ends at j: optional
// quotes and spaces around ':' or '=', then 4 or more characters up to a
// space, quote, '&', ',', ';' or '}'.
func (sc *scanner) value(j int) int {
	v, e := sc.valueAt(j)
	if v < 0 {
		return -1
	}
	if j := sc.cookieValue(v); j >= 0 {
		return j
	}
	return sc.replaceName(v, e, Redacted, v)
}

// valueAt returns the value of an assignment whose name ends at j as
// in[v:e], or v = -1 when there is none. A value that is a scheme and a
// space is none: the token after it is left to the bearer rule, which keeps
// the scheme.
func (sc *scanner) valueAt(j int) (v, e int) {
	s := sc.s
	j = skipSpace(s, skipQuote(s, j))
	if j >= len(s) || s[j] != ':' && s[j] != '=' || strings.HasPrefix(s[j:], "://") {
		return -1, 0 // "token://…" is a URL, which the url rule reads
	}
	v = skipQuote(s, skipSpace(s, j+1))
	e = valueEnd(s, v, cValueEnd)
	if e-v < 4 || isScheme(s[v:e]) && e < len(s) && charClass[s[e]]&cSpace != 0 {
		return -1, 0
	}
	return v, e
}

// namePairs marks, for each first letter of a secret's name, the second
// letters that follow it, folded by foldIndex: a quick test before
// secretName.
var namePairs = func() (t [256]uint32) {
	for _, n := range [...]string{"api", "access", "auth", "token", "secret", "password", "x-api-key", "key"} {
		t[n[0]] |= 1 << foldIndex[n[1]]
		t[n[0]-('a'-'A')] |= 1 << foldIndex[n[1]]
	}
	return t
}()

// secretName returns the length of the secret's name t starts with, or 0.
// p is the character before it.
func secretName(t string, p byte) int {
	switch t[0] | 0x20 {
	case 'a':
		for _, parts := range [...][2]string{{"api", "key"}, {"access", "token"}, {"auth", "token"}} {
			if n := compoundPrefix(t, parts[0], parts[1]); n > 0 {
				return n
			}
		}
		return foldLen(t, "authorization")
	case 't':
		return foldLen(t, "token")
	case 's':
		return foldLen(t, "secret")
	case 'p':
		return foldLen(t, "password")
	case 'x':
		return foldLen(t, "x-api-key")
	case 'k':
		if p == '_' || p == '-' {
			return foldLen(t, "key")
		}
	}
	return 0
}

// compoundPrefix returns the length of a+b, a+"_"+b or a+"-"+b at the start
// of t, ignoring case, or 0.
func compoundPrefix(t, a, b string) int {
	n := foldLen(t, a)
	if n == 0 {
		return 0
	}
	if n < len(t) && (t[n] == '_' || t[n] == '-') {
		if m := foldLen(t[n+1:], b); m > 0 {
			return n + 1 + m
		}
	}
	if m := foldLen(t[n:], b); m > 0 {
		return n + m
	}
	return 0
}

// foldLen returns len(lit) when t starts with lit, a lower-case ASCII word,
// ignoring ASCII case, and 0 otherwise.
func foldLen(t, lit string) int {
	if len(t) < len(lit) {
		return 0
	}
	for j := 0; j < len(lit); j++ {
		c := t[j]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lit[j] {
			return 0
		}
	}
	return len(lit)
}

func isScheme(v string) bool {
	return strings.EqualFold(v, "bearer") || strings.EqualFold(v, "basic")
}

func skipSpace(s string, j int) int {
	for j < len(s) && charClass[s[j]]&cSpace != 0 {
		j++
	}
	return j
}

func skipQuote(s string, j int) int {
	if j < len(s) && (s[j] == '"' || s[j] == '\'') {
		j++
	}
	return j
}

// bearer redacts the token after "Bearer" or "Basic" at i, leaving the
// scheme and one space. A token that is itself a scheme and a space leaves
// the work to that scheme, so "Bearer Bearer <token>" hides the token.
func (sc *scanner) bearer(i int) int {
	s := sc.s
	n := foldLen(s[i:], "bearer")
	if n == 0 {
		n = foldLen(s[i:], "basic")
	}
	if n == 0 || i+n >= len(s) || charClass[s[i+n]]&cSpace == 0 {
		return -1
	}
	j := skipSpace(s, i+n)
	e := j
	for e < len(s) && (charClass[s[e]]&cToken != 0 || s[e] == '=') {
		if s[e] == '=' && secretParam(s[j:e]) {
			// "Bearer api_key=…" names its value: that is redacted in
			// full, whatever it holds, like any assignment's.
			return sc.replaceName(i+n, e, " "+Redacted, j)
		}
		e++
	}
	if e-j < 6 || isScheme(s[j:e]) && e < len(s) && charClass[s[e]]&cSpace != 0 || namesNext(s[j:e]) {
		return -1
	}
	return sc.replaceName(i+n, e, " "+Redacted, j)
}

// named redacts what follows in[to:] when tok, just replaced, names it (see
// namesNext), with a ':' after it or not, and returns where the scan goes
// on, or -1 when nothing it names follows.
func (sc *scanner) named(tok string, to int) int {
	if strings.HasSuffix(tok, ":") {
		tok, to = tok[:len(tok)-1], to-1
	}
	switch {
	case !namesNext(tok):
		return -1
	case tokenWord(tok) == len(tok):
		return sc.tokenAt(to)
	}
	return sc.cookieAt(to, len(tok) > len("cookie"))
}

// namesNext reports whether t is a word that names what follows it, which a
// rule of its own redacts: the bearer rule leaves "Bearer credential
// <token>" and "Bearer Cookie: <cookies>" to it, and a value redacted whole
// takes it along.
func namesNext(t string) bool {
	return tokenWord(t) == len(t) || foldLen(t, "cookie") == len(t) || foldLen(t, "set-cookie") == len(t)
}

// tokenWord returns the length of the word that names the token after it
// (token, credential, credentials, bearer) t starts with, or 0.
func tokenWord(t string) int {
	if t == "" {
		return 0
	}
	switch t[0] | 0x20 {
	case 't':
		return foldLen(t, "token")
	case 'c':
		if n := foldLen(t, "credentials"); n > 0 {
			return n
		}
		return foldLen(t, "credential")
	case 'b':
		return foldLen(t, "bearer")
	}
	return 0
}

// afterWord redacts the token after a word that names it at i
// ("credential tok_live_51H…"): whitespace, then 8 or more token
// characters with letters and digits among them, with any '=' padding, a
// full stop left to the sentence. An ordinary word after it ("token limit
// exceeded") has no digit.
func (sc *scanner) afterWord(i int) int {
	n := tokenWord(sc.s[i:])
	if n == 0 {
		return -1
	}
	return sc.tokenAt(i + n)
}

// tokenAt redacts the token after the word that names it, which ends at w.
func (sc *scanner) tokenAt(w int) int {
	s := sc.s
	if w >= len(s) || charClass[s[w]]&cSpace == 0 {
		return -1
	}
	j := skipSpace(s, w)
	e := j
	for e < len(s) && charClass[s[e]]&cToken != 0 {
		e++
	}
	end := e
	for end < len(s) && s[end] == '=' {
		end++
	}
	if end == e {
		for end > j && s[end-1] == '.' {
			end--
		}
	}
	if end-j < 8 || !hasLetterAndDigit(s[j:end]) {
		return -1
	}
	return sc.replaceName(j, end, Redacted, j)
}

// cookie redacts the values of the Cookie or Set-Cookie header whose
// "cookie" is at i: each name=value pair's value, of Set-Cookie only the
// first pair's (the others are its attributes). It returns where the
// header's last pair ends, or -1 when no pair follows the name.
func (sc *scanner) cookie(i int) int {
	n := foldLen(sc.s[i:], "cookie")
	if n == 0 {
		return -1
	}
	return sc.cookieAt(i+n, i >= 4 && sc.last <= i-4 && foldLen(sc.s[i-4:], "set-") > 0)
}

// cookieValue redacts the cookies of a value at v that is a cookie header
// ("Authorization: cookie:sid=…"), whose own value reads on past where a
// value ends ('&'), and returns where they end, or -1.
func (sc *scanner) cookieValue(v int) int {
	if n := foldLen(sc.s[v:], "set-cookie"); n > 0 {
		return sc.cookieAt(v+n, true)
	}
	if n := foldLen(sc.s[v:], "cookie"); n > 0 {
		return sc.cookieAt(v+n, false)
	}
	return -1
}

// cookieAt redacts the cookies after a header's name, which ends at h; set
// tells Set-Cookie.
func (sc *scanner) cookieAt(h int, set bool) int {
	s := sc.s
	j := skipSpace(s, skipQuote(s, h))
	if j >= len(s) || s[j] != ':' && s[j] != '=' || strings.HasPrefix(s[j:], "://") {
		return -1
	}
	j = skipQuote(s, skipSpace(s, j+1))
	end := -1
	for {
		if j < sc.noPair {
			return end
		}
		eq := j
		for eq < len(s) && s[eq] != '=' && charClass[s[eq]]&cCookieEnd == 0 {
			eq++
		}
		if eq == j || eq >= len(s) || s[eq] != '=' {
			sc.noPair = eq
			return end
		}
		v := eq + 1
		quoted := v < len(s) && s[v] == '"'
		if quoted {
			v++
		}
		e := v
		for e < len(s) && (quoted && s[e] != '"' && s[e] != ';' && s[e] != '\n' || !quoted && charClass[s[e]]&cCookieEnd == 0) {
			e++
		}
		if e > v && s[v:e] != Redacted {
			sc.replace(v, e, Redacted)
		}
		end = e
		if quoted && e < len(s) && s[e] == '"' {
			end = e + 1
		}
		if set || end >= len(s) || s[end] != ';' {
			return end
		}
		j = skipSpace(s, end+1)
	}
}

// keyPrefix is a provider's key prefix.
type keyPrefix struct {
	text  string // in lower case unless exact
	exact bool   // matched with its case
	sep   bool   // followed by '-' or '_'
	min   int    // the shortest key after a word boundary
	keep  bool   // the replacement keeps the prefix
}

// keyPrefixes are tried in order: "sk-ant" before "sk-".
var keyPrefixes = [...]keyPrefix{
	{text: "sk-ant", sep: true, min: 6, keep: true},
	{text: "github_pat", sep: true, min: 6, keep: true},
	{text: "xai", sep: true, min: 6, keep: true},
	{text: "gsk", sep: true, min: 6, keep: true},
	{text: "ghp", sep: true, min: 6, keep: true},
	{text: "gho", sep: true, min: 6, keep: true},
	{text: "ghs", sep: true, min: 6, keep: true},
	{text: "ghu", sep: true, min: 6, keep: true},
	{text: "ghr", sep: true, min: 6, keep: true},
	{text: "xoxa", sep: true, min: 6, keep: true},
	{text: "xoxb", sep: true, min: 6, keep: true},
	{text: "xoxp", sep: true, min: 6, keep: true},
	{text: "xoxr", sep: true, min: 6, keep: true},
	{text: "sk-", min: 6, keep: true},
	{text: "rk-", min: 6, keep: true},
	{text: "pk-", min: 6, keep: true},
	{text: "AIza", exact: true, min: 20},
}

// keyPrefixesBy lists keyPrefixes, in order, by the byte they start with.
var keyPrefixesBy = func() (t [256][]keyPrefix) {
	for _, kp := range keyPrefixes {
		t[kp.text[0]] = append(t[kp.text[0]], kp)
		if !kp.exact {
			up := kp.text[0] - ('a' - 'A')
			t[up] = append(t[up], kp)
		}
	}
	return t
}()

// A key glued to a word character needs more than one after a boundary to
// tell it from a word, and a token without a name much more.
const (
	gluedKeyLen = 16 // characters of a glued key
	randomRun   = 10 // letters and digits in a row in it, with both
	opaqueLen   = 32 // characters of an opaque token
	opaqueRun   = 16 // letters and digits in a row in it, with both
)

// keyPairs marks, for each first byte of a key prefix, the second letters
// that follow it, folded by foldIndex: a quick test before trying prefixes.
var keyPairs = func() (t [256]uint32) {
	for _, kp := range keyPrefixes {
		a, b := kp.text[0], kp.text[1]
		t[a] |= 1 << foldIndex[b]
		if !kp.exact {
			t[a-('a'-'A')] |= 1 << foldIndex[b]
		}
	}
	return t
}()

// foldIndex maps a letter of either case to 0-25, '-' to 26, '_' to 27 and
// any other byte to 28: a bit in keyPairs.
var foldIndex = func() (t [256]uint8) {
	for c := range t {
		switch {
		case 'a' <= c && c <= 'z':
			t[c] = uint8(c - 'a')
		case 'A' <= c && c <= 'Z':
			t[c] = uint8(c - 'A')
		case c == '-':
			t[c] = 26
		case c == '_':
			t[c] = 27
		default:
			t[c] = 28
		}
	}
	return t
}()

// key redacts a provider's key whose prefix is at i; glued tells that a word
// character precedes it.
func (sc *scanner) key(i int, glued bool) int {
	s := sc.s
	for _, kp := range keyPrefixesBy[s[i]] {
		t := s[i:]
		if kp.exact && !strings.HasPrefix(t, kp.text) || !kp.exact && foldLen(t, kp.text) == 0 {
			continue
		}
		k := i + len(kp.text)
		if kp.sep {
			if k >= len(s) || s[k] != '-' && s[k] != '_' {
				continue
			}
			k++
		}
		end, random := sc.keyRun(i, k)
		need := kp.min
		if glued {
			need = max(need, gluedKeyLen)
		}
		if end-k < need || glued && !random {
			continue
		}
		from := i
		if kp.keep {
			from = k
		}
		return sc.replaceName(from, end, Redacted, k)
	}
	return -1
}

// keyRun returns the end of the run of key characters from i, where a
// prefix starts (its characters are key characters too), and whether the key
// from k in it has a random run. It scans a run once: later prefixes inside
// it are answered from the cache.
func (sc *scanner) keyRun(i, k int) (end int, random bool) {
	if i < sc.keyStart || i >= sc.keyEnd {
		s := sc.s
		sc.keyStart, sc.keyRandom = i, -1
		seg, lastAlpha, lastDigit := i, -1, -1
		j := i
		for ; ; j++ {
			var c uint16
			if j < len(s) {
				c = charClass[s[j]]
			}
			switch {
			case c&cAlpha != 0:
				lastAlpha = j
				continue
			case c&cDigit != 0:
				lastDigit = j
				continue
			}
			// The letters and digits seg..j end here. A key starting at any
			// k <= t keeps randomRun of them with both a letter and a digit.
			if t := min(j-randomRun, lastAlpha, lastDigit); t >= seg {
				sc.keyRandom = max(sc.keyRandom, t)
			}
			if c&cKey == 0 {
				break
			}
			seg = j + 1
		}
		sc.keyEnd = j
	}
	return sc.keyEnd, k <= sc.keyRandom
}

// objectIDs are prefixes of the IDs providers give requests and objects.
var objectIDs = [...]string{"req_", "chatcmpl-", "resp_", "msg_", "msgbatch_", "run_", "thread_", "asst_", "call_", "toolu_",
	"file-", "file_", "batch_", "vs_", "ftjob-", "org-", "proj_"}

// objectIDStart marks the first bytes of objectIDs.
var objectIDStart = func() (t [256]bool) {
	for _, p := range objectIDs {
		t[p[0]] = true
	}
	return t
}()

// opaque redacts the opaque token that starts at i, if it is one.
func (sc *scanner) opaque(i int) int {
	if i < sc.tokEnd && (!sc.tokPath || sc.path) {
		return -1
	}
	s, in := sc.s, uint16(cToken)
	if sc.path {
		in = cPart
	}
	j := i
	for j < len(s) && charClass[s[j]]&in != 0 {
		j++
	}
	if j-i < opaqueLen && !(j-i >= opaqueRun && sc.urlPart(i) && allOf(s[i:j], cKey)) {
		sc.tokEnd, sc.tokPath = j, sc.path // a part is shorter still
		return -1
	}
	seg, lastAlpha, lastDigit := i, -1, -1
	random := false
	for q := i; q < j && !random; q++ {
		k := charClass[s[q]]
		switch {
		case k&cAlpha != 0:
			lastAlpha = q
		case k&cDigit != 0:
			lastDigit = q
		default:
			seg = q + 1
			continue
		}
		random = q+1-seg >= opaqueRun && lastAlpha >= seg && lastDigit >= seg
	}
	if !random {
		// Any part of this token is not opaque either: shorter, with
		// shorter runs.
		sc.tokEnd, sc.tokPath = j, sc.path
		return -1
	}
	if objectIDStart[s[i]] && isObjectID(s[i:j]) {
		return -1
	}
	end := j
	for end < len(s) && s[end] == '=' {
		end++
	}
	if end == j {
		for s[end-1] == '.' { // a full stop ends a sentence, not the token
			end--
		}
	}
	return sc.replaceName(i, end, Redacted, i)
}

// urlPart reports whether a part of a path starts at i in a URL's path,
// after a slash.
func (sc *scanner) urlPart(i int) bool {
	return sc.path && sc.stop < 0 && sc.urlFrom < i && i < sc.urlTo && sc.prev(i) == '/'
}

// isObjectID reports whether tok is a provider's object ID: a known prefix,
// then letters and digits only.
func isObjectID(tok string) bool {
	for _, p := range objectIDs {
		if strings.HasPrefix(tok, p) {
			return allOf(tok[len(p):], cAlpha|cDigit)
		}
	}
	return false
}

// allOf reports whether every byte of s is in one of the charClass.
func allOf(s string, class uint16) bool {
	for i := 0; i < len(s); i++ {
		if charClass[s[i]]&class == 0 {
			return false
		}
	}
	return true
}

func hasLetterAndDigit(s string) bool {
	var seen uint16
	for i := 0; i < len(s); i++ {
		seen |= charClass[s[i]] & (cAlpha | cDigit)
	}
	return seen == cAlpha|cDigit
}
