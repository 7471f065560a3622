package policies

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
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
	if fe := failedIn(err); fe != nil {
		// A layer's failure carries its classification: the layers and
		// callers it reaches read it instead of working it out again, user
		// rules included, so that one failure has one class on every span.
		return Classification{Class: fe.Class, Type: fe.Type, Reason: fe.Reason, RetryAfter: fe.retry}
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
	return classify(err)
}

// failedIn returns the *FailedError that decides err's class: err itself,
// or the first in its chain when nothing before it carries a class of its
// own (an explicit *Error, a recovered panic). It looks no further than a
// few wrappers deep: a layer's failure is near the top of what it returns.
func failedIn(err error) *FailedError {
	for depth := 0; err != nil && depth < 8; depth++ {
		switch e := err.(type) {
		case *FailedError:
			if e.Class != "" {
				return e
			}
			return nil
		case *Error, *PanicError:
			return nil
		case interface{ Unwrap() []error }:
			if errs := e.Unwrap(); len(errs) > 0 {
				err = errs[0]
				continue
			}
			return nil
		case interface{ Unwrap() error }:
			err = e.Unwrap()
			continue
		}
		return nil
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
// matched in the error's type and text, ignoring ASCII case.
var (
	permanentMarkers = []string{
		"not a valid image", "invalid image", "image data is not", // a broken image in the request
		"login expired", "login failed", "re-auth", "unauthorized", // the gateway's login lapsed
		"invalid api key", "invalid_api_key", // a wrong credential
	}
	overflowPhrases = []string{"maximum context length", "prompt is too long", "context_length_exceeded"}
)

// classify applies the default rules in order; the first match wins.
func classify(err error) Classification {
	if err == nil {
		return Classification{}
	}
	// 1. An explicit class.
	var explicit *Error
	if errors.As(err, &explicit) {
		t := explicit.Type
		if t == "" {
			t = string(explicit.Class)
		}
		return Classification{Class: explicit.Class, Type: t, Reason: "explicit " + string(explicit.Class), RetryAfter: explicit.RetryAfter}
	}
	// 2. Rejections by a policy: they say nothing about the call itself.
	var rejected *RejectedError
	if errors.As(err, &rejected) {
		return Classification{Class: Transient, Type: rejected.typ(), Reason: rejected.Policy + " rejected the call", RetryAfter: rejected.RetryAfter}
	}
	switch {
	case errors.Is(err, circuitbreaker.ErrOpen):
		return Classification{Class: Transient, Type: "circuit_open", Reason: "circuit breaker open"}
	case errors.Is(err, bulkhead.ErrFull):
		return Classification{Class: Transient, Type: "bulkhead_full", Reason: "bulkhead full"}
	case errors.Is(err, ratelimiter.ErrExceeded):
		return Classification{Class: Transient, Type: "rate_limited", Reason: "rate limiter exceeded"}
	case errors.Is(err, ErrBudgetExhausted), errors.Is(err, budget.ErrExceeded):
		return Classification{Class: Transient, Type: "budget_exhausted", Reason: "retry budget exhausted"}
	}
	// 3. Time: our own per-attempt timeout is Transient, the caller's end is not.
	var te *TimeoutError
	if errors.As(err, &te) || errors.Is(err, timeout.ErrExceeded) {
		return Classification{Class: Transient, Type: "attempt_timeout", Reason: "attempt timeout"}
	}
	if errors.Is(err, context.Canceled) {
		return Classification{Class: Canceled, Type: "context.Canceled", Reason: "context canceled"}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Classification{Class: Canceled, Type: "context.DeadlineExceeded", Reason: "context deadline exceeded"}
	}
	// 4. Bugs.
	var pe *PanicError
	if errors.As(err, &pe) {
		return Classification{Class: Programming, Type: "panic", Reason: "panic"}
	}
	if errors.Is(err, errors.ErrUnsupported) {
		return Classification{Class: Programming, Type: "errors.ErrUnsupported", Reason: "unsupported"}
	}

	api, decoded := providerAnswer(err)
	hasAPI := api != nil
	// The text the words are read in: an API error's own code and message
	// when it is the error itself (no layer's words around it), else the
	// whole text, and the provider's words besides when an SDK's error
	// stands for them (its own text says little: "429 Too Many Requests").
	var msg string
	if e, direct := err.(*APIError); direct {
		msg = e.Code + ": " + e.Message
	} else if msg = engine.ErrorText(err); decoded {
		msg += " " + api.Code + ": " + api.Message
	}
	typ := errorTypeOf(err, api)
	with := func(class Class, reason string) Classification {
		c := Classification{Class: class, Type: typ, Reason: reason}
		if hasAPI {
			c.RetryAfter = api.RetryAfter
		}
		return c
	}

	// 5. Context overflow: compaction, not retrying, can help.
	if hasAPI && (api.StatusCode == 413 || api.Code == "context_length_exceeded" || api.Code == "request_too_large") {
		return with(ContextOverflow, apiReason(api))
	}
	for _, p := range overflowPhrases {
		if containsFold(msg, p) {
			return with(ContextOverflow, "message: "+p)
		}
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
	for _, m := range permanentMarkers {
		if containsFold(typ, m) || containsFold(msg, m) {
			return with(Permanent, "marker: "+m)
		}
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
	if reason, ok := transientNetwork(err); ok {
		return with(Transient, reason)
	}
	if strings.TrimSpace(apiMessage(api, hasAPI, msg)) == "" {
		return with(Transient, "empty message")
	}
	if m := matchTransient(msg); m != "" {
		return with(Transient, "pattern: "+m)
	}
	// 9. Certificates and the remaining client errors.
	if isTLS(err) {
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

// containsFold reports whether s contains sub, a lower-case ASCII phrase,
// ignoring ASCII case, without allocating.
func containsFold(s, sub string) bool {
	if len(sub) == 0 {
		return true
	}
	first := sub[0]
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i]|0x20 != first && s[i] != first {
			continue
		}
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// apiMessage is the text the empty-message rule looks at: the provider's
// message for an API error, the whole error text otherwise.
func apiMessage(api *APIError, hasAPI bool, msg string) string {
	if hasAPI {
		if api.StatusCode != 0 || api.Code != "" {
			return "non-empty" // a status or code says what happened
		}
		return api.Message
	}
	return msg
}

func apiReason(api *APIError) string {
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
	if Redact(code) != code {
		return ""
	}
	return code
}

// transientNetwork recognises Go's network failures that a later call may
// not meet, with the reason it names.
func transientNetwork(err error) (string, bool) {
	_, reason := netFailure(err)
	return reason, reason != ""
}

// errorType returns the low-cardinality error.type of err: the API error's
// code or status when there is one; else the name an error in the chain
// gives itself (an ErrorType() string method, as retrace's stream and limit
// errors have); else a short stable name for the network and TLS failures
// below; else "_OTHER", the conventions' fallback. A Go type name is never
// used: it changes with the code, and the layers of one failure would
// disagree on it.
func errorType(err error) string {
	api, _ := AsAPIError(err)
	return errorTypeOf(err, api)
}

// errorTypeOf is errorType with err's provider answer, if it has one,
// already found.
func errorTypeOf(err error, api *APIError) string {
	if api != nil {
		if code := safeCode(api.Code); code != "" {
			return code
		}
		if api.StatusCode != 0 {
			return statusText(api.StatusCode)
		}
		if api.Code != "" {
			return "_OTHER"
		}
	}
	var named interface{ ErrorType() string }
	if errors.As(err, &named) {
		if t := safeCode(named.ErrorType()); t != "" {
			return t
		}
	}
	if t, ok := networkType(err); ok {
		return t
	}
	return "_OTHER"
}

// networkType names the network and TLS failures error.type can tell apart.
func networkType(err error) (string, bool) {
	typ, _ := netFailure(err)
	return typ, typ != ""
}

// netFailure is the one table of Go's network failures: the error.type
// each is named by, and the reason it is transient ("" for one that is not:
// a DNS name that does not exist, a certificate).
func netFailure(err error) (typ, reason string) {
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return "connection_reset", "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused", "connection refused"
	case errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return "connection_closed", "connection closed"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected_eof", "unexpected EOF"
	case errors.Is(err, io.EOF):
		return "eof", "other side closed"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout", "timeout"
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return "network_error", "network: " + oe.Op
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		if dns.IsTemporary || dns.IsTimeout {
			return "dns_error", "dns"
		}
		return "dns_error", ""
	}
	if isTLS(err) {
		return "tls_error", ""
	}
	return "", ""
}

// isTLS reports whether err is a certificate or TLS record failure.
func isTLS(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalidCert      x509.CertificateInvalidError
		verification     *tls.CertificateVerificationError
		record           tls.RecordHeaderError
	)
	return errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalidCert) ||
		errors.As(err, &verification) || errors.As(err, &record)
}
