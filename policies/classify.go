package policies

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/ratelimiter"
	"github.com/failsafe-go/failsafe-go/timeout"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/errchain"
	"github.com/retrace-go/retrace/internal/redact"
)

// Rule classifies the errors it recognises and reports false for the rest.
// User rules run before the defaults, in the order given.
type Rule func(err error) (Classification, bool)

// Classifier applies user rules, then the default rules. The zero value and a
// nil *Classifier apply the defaults only. It is safe for concurrent use.
type Classifier struct {
	rules []Rule
}

// NewClassifier returns a classifier that tries rules, in order, before the
// defaults.
func NewClassifier(rules ...Rule) *Classifier {
	return &Classifier{rules: append([]Rule(nil), rules...)}
}

// Classify classifies err with the default rules.
func Classify(err error) Classification { return (*Classifier)(nil).Classify(err) }

// Classify classifies err: the first matching user rule wins, then the first
// matching default rule. A nil error has no class.
func (c *Classifier) Classify(err error) (cl Classification) {
	if err == nil {
		return Classification{}
	}
	defer func() {
		// An error whose own methods panic (a nil *T whose Error or Unwrap
		// dereferences) is a bug where it was made, not in the layer that
		// classifies it: it must not take the layer, and its permits, down.
		if v := recover(); v != nil {
			cl = Classification{Class: Programming, Type: "error_panicked", Reason: fmt.Sprintf("the error's methods panicked: %v", v)}
		}
	}()
	var ch errchain.Chain
	ch.Add(err)
	if fe := failedIn(&ch); fe != nil {
		// A layer's failure carries its classification: the layers and
		// callers it reaches read it instead of working it out again, user
		// rules included, so that one failure has one class on every span.
		return Classification{Class: fe.Class, Type: fe.Type, Reason: fe.Reason, RetryAfter: fe.RetryAfter, answer: fe}
	}
	if c != nil {
		for _, r := range c.rules {
			if cl, ok := runRule(r, err); ok {
				if cl.Type == "" {
					cl.Type = errorType(err)
				}
				return cl
			}
		}
	}
	return classifyChain(err, &ch)
}

// failedIn returns the layer's stop (an *Error with an Outcome and a
// class) that decides the chain's class: its first *Error, when that is
// one. A layer's failure is near the top of what it returns.
func failedIn(c *errchain.Chain) *Error {
	for _, err := range c.All() {
		if e, ok := err.(*Error); ok {
			if e.Outcome != "" && e.Class != "" {
				return e
			}
			return nil
		}
	}
	return nil
}

// runRule runs a user rule. A rule that panics is a bug in the rule, not in
// the call: the error is classified Programming (never retried) instead of
// the panic escaping the layer with its permits held.
func runRule(r Rule, err error) (cl Classification, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			cl, ok = Classification{Class: Programming, Type: "classifier_panic", Reason: fmt.Sprintf("a classifier rule panicked: %v", v)}, true
		}
	}()
	return r(err)
}

// The words that decide when nothing structured does: permanentMarkers are
// what a runtime never retries (matchTransient has what a session retries),
// matched in the error's type and text, ignoring ASCII case; each with the
// reason it gives, made once.
var (
	permanentMarkers = phrases("marker: ",
		"not a valid image", "invalid image", "image data is not", // a broken image in the request
		"login expired", "login failed", "re-auth", "unauthorized", // the gateway's login lapsed
		"invalid api key", "invalid_api_key", // a wrong credential
	)
	overflowPhrases = phrases("message: ", "maximum context length", "prompt is too long", "context_length_exceeded")
)

// phrase is a lower-case ASCII phrase a rule looks for, and the reason a
// match gives.
type phrase struct {
	text   string
	reason string
}

// phraseSet is the phrases of one rule (at most 64), indexed by their
// first byte in either case, so that a text is read once for all of them,
// not once per phrase, and without a lowered copy of it.
type phraseSet struct {
	ps      []phrase
	byFirst [256]uint64 // bit k: phrase k starts with the byte, ignoring ASCII case
}

func phrases(prefix string, texts ...string) *phraseSet {
	set := &phraseSet{ps: make([]phrase, len(texts))}
	for i, t := range texts {
		if len(t) < 2 || i >= 64 {
			panic("policies: a phrase set holds at most 64 phrases of two bytes or more")
		}
		set.ps[i] = phrase{text: t, reason: prefix + t}
		set.byFirst[t[0]] |= 1 << i
		if c := t[0]; 'a' <= c && c <= 'z' {
			set.byFirst[c-'a'+'A'] |= 1 << i
		}
	}
	return set
}

// find returns the first phrase of the set, in the set's order, that one
// of texts holds anywhere, ignoring ASCII case.
func (set *phraseSet) find(texts ...string) (phrase, bool) {
	var found uint64 // bit k: phrase k is in a text
	for _, s := range texts {
		for i := 0; i < len(s); i++ {
			for cand := set.byFirst[s[i]] &^ found; cand != 0; cand &= cand - 1 {
				// The second byte first: it rules out nearly every
				// candidate without a comparison of the whole phrase.
				if k := bits.TrailingZeros64(cand); len(s)-i > 1 && lower(s[i+1]) == set.ps[k].text[1] && hasLowerPrefix(s[i:], set.ps[k].text) {
					found |= 1 << k
				}
			}
		}
	}
	if found == 0 {
		return phrase{}, false
	}
	return set.ps[bits.TrailingZeros64(found)], true
}

// hasLowerPrefix reports whether s begins with the lower-case ASCII p,
// ignoring the ASCII case of s.
func hasLowerPrefix(s, p string) bool {
	if len(s) < len(p) {
		return false
	}
	for j := 0; j < len(p); j++ {
		if lower(s[j]) != p[j] {
			return false
		}
	}
	return true
}

// lower is c lowered if it is an ASCII letter.
func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// explicitIn returns the first *Error of the chain with a class of its own.
func explicitIn(c *errchain.Chain) (*Error, bool) {
	for _, err := range c.All() {
		if e, ok := err.(*Error); ok && e.Class != "" {
			return e, true
		}
	}
	return nil, false
}

// classifyChain applies the default rules in order to err, whose chain c
// is read once; the first match wins.
func classifyChain(err error, c *errchain.Chain) Classification {
	// 1. An explicit class: a tool's or provider's own, a policy's
	// rejection, the layer's own timeout, a recovered panic.
	if explicit, ok := explicitIn(c); ok {
		t, reason := explicit.Type, explicit.Reason
		if t == "" {
			t = string(explicit.Class)
		}
		if reason == "" {
			reason = "explicit " + string(explicit.Class)
		}
		return Classification{Class: explicit.Class, Type: t, Reason: reason, RetryAfter: explicit.RetryAfter}
	}
	// 2. Rejections by a policy: they say nothing about the call itself.
	// One pass over the chain finds every sentinel the rules ask for.
	m := c.Match(sentinels[:])
	switch {
	case m&(1<<sentOpen) != 0:
		return Classification{Class: Transient, Type: "circuit_open", Reason: "circuit breaker open"}
	case m&(1<<sentFull) != 0:
		return Classification{Class: Transient, Type: "bulkhead_full", Reason: "bulkhead full"}
	case m&(1<<sentRate) != 0:
		return Classification{Class: Transient, Type: "rate_limited", Reason: "rate limiter exceeded"}
	case m&(1<<sentBudget) != 0:
		return Classification{Class: Transient, Type: "budget_exhausted", Reason: "retry budget exhausted"}
	// 3. Time: our own per-attempt timeout is Transient, the caller's end is not.
	case m&(1<<sentTimeout) != 0:
		return Classification{Class: Transient, Type: "attempt_timeout", Reason: "attempt timeout"}
	case m&(1<<sentCanceled) != 0:
		return Classification{Class: Canceled, Type: "context.Canceled", Reason: "context canceled"}
	case m&(1<<sentDeadline) != 0:
		return Classification{Class: Canceled, Type: "context.DeadlineExceeded", Reason: "context deadline exceeded"}
	// 4. Bugs.
	case m&(1<<sentUnsupported) != 0:
		return Classification{Class: Programming, Type: "errors.ErrUnsupported", Reason: "unsupported"}
	}

	api, decoded := providerAnswerIn(c)
	hasAPI := api != nil
	netType, netReason := netFailureOf(c, m)
	// The text the words are read in: an API error's own code and message
	// when it is the error itself (no layer's words around it), else the
	// whole text, and the provider's words besides when an SDK's error
	// stands for them (its own text says little: "429 Too Many Requests").
	var msg string
	if e, direct := err.(*Error); direct && e.answer() {
		msg = e.Code + ": " + e.Message
	} else if msg = engine.ErrorText(err); decoded {
		msg += " " + api.Code + ": " + api.Message
	}
	typ := errorTypeOf(c, api, netType)
	with := func(class Class, reason string) Classification {
		c := Classification{Class: class, Type: typ, Reason: reason}
		if hasAPI {
			c.RetryAfter, c.answer = api.RetryAfter, api
		}
		return c
	}

	// 5. Context overflow: compaction, not retrying, can help.
	if hasAPI && (api.StatusCode == 413 || api.Code == "context_length_exceeded" || api.Code == "request_too_large") {
		return with(ContextOverflow, apiReason(api))
	}
	if p, ok := overflowPhrases.find(msg); ok {
		return with(ContextOverflow, p.reason)
	}
	// 6. Quota and billing: nothing in this task will succeed.
	if hasAPI {
		switch {
		case api.Code == "insufficient_quota", api.Code == "billing_error",
			strings.HasSuffix(api.Code, "_spend_limit_exceeded"), api.StatusCode == 402:
			return with(Fatal, apiReason(api))
		}
	}
	// 7. Credentials and the permanent markers.
	if hasAPI {
		switch {
		case api.StatusCode == 401, api.StatusCode == 403,
			api.Code == "invalid_api_key", api.Code == "authentication_error", api.Code == "permission_error":
			return with(Permanent, apiReason(api))
		}
	}
	if p, ok := permanentMarkers.find(typ, msg); ok {
		return with(Permanent, p.reason)
	}
	// 8. Transient: the provider is busy, the network blinked, the stream dropped.
	if hasAPI {
		switch {
		case api.StatusCode == 408, api.StatusCode == 409, api.StatusCode == 429, api.StatusCode >= 500:
			return with(Transient, apiReason(api))
		case api.Code == "rate_limit_exceeded", api.Code == "rate_limit_error", api.Code == "api_error",
			api.Code == "timeout_error", api.Code == "overloaded_error", api.Code == "server_error":
			return with(Transient, apiReason(api))
		}
	}
	if netReason != "" {
		return with(Transient, netReason)
	}
	if strings.TrimSpace(apiMessage(api, hasAPI, msg)) == "" {
		return with(Transient, "empty message")
	}
	if m := matchTransient(msg); m != "" {
		return with(Transient, patternReason(m))
	}
	// 9. Certificates and the remaining client errors.
	if netType == "tls_error" {
		return with(Permanent, "tls")
	}
	if hasAPI && api.StatusCode >= 400 && api.StatusCode < 500 {
		return with(Permanent, apiReason(api))
	}
	if hasAPI && api.Code == "not_found_error" || hasAPI && api.Code == "invalid_request_error" {
		return with(Permanent, apiReason(api))
	}
	if hasAPI && api.event {
		// A provider that failed in the middle of its answer, with a code no
		// rule knows, may answer the next time.
		c := with(Transient, "error event")
		c.Type = "stream_error"
		return c
	}
	return with(Unknown, "unknown")
}

// apiMessage is the text the empty-message rule looks at: the provider's
// message for an API error, the whole error text otherwise.
func apiMessage(api *Error, hasAPI bool, msg string) string {
	if hasAPI {
		if api.StatusCode != 0 || api.Code != "" {
			return "non-empty" // a status or code says what happened
		}
		return api.Message
	}
	return msg
}

func apiReason(api *Error) string {
	code := safeCode(api.Code)
	if api.StatusCode != 0 {
		if code != "" {
			return "http " + statusText(api.StatusCode) + " " + code
		}
		if api.StatusCode > 0 && api.StatusCode < len(statusReasons) {
			return statusReasons[api.StatusCode]
		}
		return "http " + statusText(api.StatusCode)
	}
	if code == "" {
		return "code _OTHER"
	}
	return "code " + code
}

// statusTexts and statusReasons are the HTTP statuses as a type ("503")
// and a reason ("http 503"), made once and never changed: a failure names
// its status on every attempt of every layer.
var statusTexts, statusReasons = func() (t, r [600]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
		r[i] = "http " + t[i]
	}
	return t, r
}()

func statusText(code int) string {
	if code >= 0 && code < len(statusTexts) {
		return statusTexts[code]
	}
	return strconv.Itoa(code)
}

// safeCode is a provider's error code as retrace writes it into error.type
// and reasons, or "" when it cannot be written there. A code is the
// provider's input, not retrace's: one that is not a short identifier, or
// that holds something secret-shaped, would put high-cardinality or secret
// text on every span.
func safeCode(code string) string {
	if code == "" || len(code) > 64 {
		return ""
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':') {
			return ""
		}
	}
	if redact.IsSecret(code, nil) {
		return ""
	}
	return code
}

// errorTypeOther is the conventions' error.type for an error of no known
// type, telemetry.ErrorTypeOther (a test keeps them equal): package policies
// does not import telemetry, so that a user of the policies alone does not
// depend on OpenTelemetry.
const errorTypeOther = "_OTHER"

// errorType returns the low-cardinality error.type of err: the API error's
// code or status when there is one; else the name an error in the chain
// gives itself (an ErrorType() string method, as retrace's stream and limit
// errors have); else a short stable name for the network and TLS failures
// below; else "_OTHER", the conventions' fallback. A Go type name is never
// used: it changes with the code, and the layers of one failure would
// disagree on it.
func errorType(err error) string {
	var c errchain.Chain
	c.Add(err)
	api, _ := providerAnswerIn(&c)
	typ, _ := netFailure(&c)
	return errorTypeOf(&c, api, typ)
}

// errorTypeOf is errorType with the chain's provider answer, if it has one,
// and its network failure's name already found.
func errorTypeOf(c *errchain.Chain, api *Error, netType string) string {
	if api != nil {
		if code := safeCode(api.Code); code != "" {
			return code
		}
		if api.StatusCode != 0 {
			return statusText(api.StatusCode)
		}
		if api.Code != "" {
			return errorTypeOther
		}
	}
	for _, err := range c.All() {
		// retrace's own failures name themselves (a dropped stream, a limit
		// passed), and so may any error, with an ErrorType() string method.
		var name string
		switch e := err.(type) {
		case *Error:
			name = e.Type
		case interface{ ErrorType() string }:
			name = e.ErrorType()
		}
		if t := safeCode(name); t != "" {
			return t
		}
	}
	if netType != "" {
		return netType
	}
	return errorTypeOther
}

// sentinels are the errors the rules look for in a chain, each by its
// index below: a chain is matched against all of them in one pass.
var sentinels = [...]error{
	sentOpen: circuitbreaker.ErrOpen, sentFull: bulkhead.ErrFull, sentRate: ratelimiter.ErrExceeded, sentBudget: budget.ErrExceeded,
	sentTimeout: timeout.ErrExceeded, sentCanceled: context.Canceled, sentDeadline: context.DeadlineExceeded,
	sentUnsupported: errors.ErrUnsupported,
	sentReset:       syscall.ECONNRESET, sentRefused: syscall.ECONNREFUSED, sentAborted: syscall.ECONNABORTED, sentPipe: syscall.EPIPE,
	sentClosed: net.ErrClosed, sentUnexpectedEOF: io.ErrUnexpectedEOF, sentEOF: io.EOF,
}

const (
	sentOpen = iota
	sentFull
	sentRate
	sentBudget
	sentTimeout
	sentCanceled
	sentDeadline
	sentUnsupported
	sentReset
	sentRefused
	sentAborted
	sentPipe
	sentClosed
	sentUnexpectedEOF
	sentEOF
)

// netFailure is the one table of Go's network failures: the error.type
// each is named by, and the reason it is transient ("" for one that is not:
// a DNS name that does not exist, a certificate).
func netFailure(c *errchain.Chain) (typ, reason string) {
	return netFailureOf(c, c.Match(sentinels[:]))
}

// netFailureOf is netFailure of a chain whose sentinels m are known
// (errchain.Chain.Match of sentinels).
func netFailureOf(c *errchain.Chain, m uint64) (typ, reason string) {
	switch {
	case m&(1<<sentReset) != 0:
		return "connection_reset", "connection reset"
	case m&(1<<sentRefused) != 0:
		return "connection_refused", "connection refused"
	case m&(1<<sentAborted|1<<sentPipe|1<<sentClosed) != 0:
		return "connection_closed", "connection closed"
	case m&(1<<sentUnexpectedEOF) != 0:
		return "unexpected_eof", "unexpected EOF"
	case m&(1<<sentEOF) != 0:
		return "eof", "other side closed"
	}
	if ne, ok := errchain.As[net.Error](c); ok && ne.Timeout() {
		return "timeout", "timeout"
	}
	if oe, ok := errchain.As[*net.OpError](c); ok {
		return "network_error", "network: " + oe.Op
	}
	if dns, ok := errchain.As[*net.DNSError](c); ok {
		if dns.IsTemporary || dns.IsTimeout {
			return "dns_error", "dns"
		}
		return "dns_error", ""
	}
	if isTLS(c) {
		return "tls_error", ""
	}
	return "", ""
}

// isTLS reports whether the chain holds a certificate or TLS record failure.
func isTLS(c *errchain.Chain) bool {
	if !c.HasAs() {
		// No error of the chain answers errors.As itself: the types are
		// the question, and one pass asks it.
		for _, e := range c.All() {
			switch e.(type) {
			case x509.UnknownAuthorityError, x509.HostnameError, x509.CertificateInvalidError, *tls.CertificateVerificationError, tls.RecordHeaderError:
				return true
			}
		}
		return false
	}
	_, unknownAuthority := errchain.As[x509.UnknownAuthorityError](c)
	_, hostname := errchain.As[x509.HostnameError](c)
	_, invalidCert := errchain.As[x509.CertificateInvalidError](c)
	_, verification := errchain.As[*tls.CertificateVerificationError](c)
	_, record := errchain.As[tls.RecordHeaderError](c)
	return unknownAuthority || hostname || invalidCert || verification || record
}
