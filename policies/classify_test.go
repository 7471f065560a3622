package policies_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/failsafe-go/failsafe-go/timeout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/internal/failure"
	. "github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func api(status int, code, msg string) *Error {
	return &Error{StatusCode: status, Code: code, Message: msg}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// An error that names its own type (an ErrorType method) gives error.type,
// through any wrapping; a name that could carry text is refused.
type namedErr struct{ name string }

func (e namedErr) Error() string     { return "named" }
func (e namedErr) ErrorType() string { return e.name }

func TestErrorTypeNamedByTheError(t *testing.T) {
	assert.Equal(t, "stream_dropped", Classify(fmt.Errorf("turn: %w", namedErr{"stream_dropped"})).Type)
	assert.Equal(t, "_OTHER", Classify(namedErr{"has spaces and sk-secret"}).Type)
	assert.Equal(t, "_OTHER", Classify(errors.New("plain")).Type, "never a Go type name")
}

func TestClassifyRules(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		class  Class
		typ    string
		reason string
	}{
		// explicit
		{"explicit error", &Error{Class: Fatal, Type: "quota", Err: errors.New("x")}, Fatal, "quota", "explicit fatal"},
		{"explicit, wrapped", fmt.Errorf("tool: %w", &Error{Class: Permanent, Err: errors.New("bad args")}), Permanent, "permanent", "explicit permanent"},
		// rejections
		{"breaker open", circuitbreaker.ErrOpen, Transient, "circuit_open", "circuit breaker open"},
		{"bulkhead full", bulkhead.ErrFull, Transient, "bulkhead_full", "bulkhead full"},
		{"budget", budget.ErrExceeded, Transient, "budget_exhausted", "retry budget exhausted"},
		// time
		{"own attempt timeout", TimedOut(time.Second, context.DeadlineExceeded), Transient, "attempt_timeout", "attempt timeout"},
		{"failsafe timeout", timeout.ErrExceeded, Transient, "attempt_timeout", "attempt timeout"},
		{"caller canceled", context.Canceled, Canceled, "context.Canceled", "context canceled"},
		{"caller deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), Canceled, "context.DeadlineExceeded", "context deadline exceeded"},
		// programming
		{"panic", failure.Recovered("boom", nil), Programming, "panic", "panic"},
		{"unsupported", fmt.Errorf("streaming: %w", errors.ErrUnsupported), Programming, "errors.ErrUnsupported", "unsupported"},
		// context overflow
		{"openai overflow", api(400, "context_length_exceeded", "This model's maximum context length is 128000 tokens"), ContextOverflow, "context_length_exceeded", "http 400 context_length_exceeded"},
		{"413", api(413, "", "too big"), ContextOverflow, "413", "http 413"},
		{"anthropic too large", api(413, "request_too_large", ""), ContextOverflow, "request_too_large", "http 413 request_too_large"},
		{"prompt too long text", errors.New("prompt is too long: 210000 tokens > 200000 maximum"), ContextOverflow, "_OTHER", "message: prompt is too long"},
		// fatal
		{"insufficient quota", api(429, "insufficient_quota", "You exceeded your current quota"), Fatal, "insufficient_quota", "http 429 insufficient_quota"},
		{"spend limit", api(400, "monthly_spend_limit_exceeded", ""), Fatal, "monthly_spend_limit_exceeded", "http 400 monthly_spend_limit_exceeded"},
		{"402", api(402, "", "payment required"), Fatal, "402", "http 402"},
		{"billing", api(400, "billing_error", ""), Fatal, "billing_error", "http 400 billing_error"},
		// permanent
		{"401", api(401, "invalid_api_key", "Incorrect API key provided"), Permanent, "invalid_api_key", "http 401 invalid_api_key"},
		{"403", api(403, "permission_error", ""), Permanent, "permission_error", "http 403 permission_error"},
		{"anthropic auth", api(0, "authentication_error", "invalid x-api-key"), Permanent, "authentication_error", "code authentication_error"},
		{"marker: invalid image", errors.New("Invalid image: image data is not valid base64"), Permanent, "_OTHER", "marker: invalid image"},
		{"marker: login expired", errors.New("openai-codex: login expired, run login again"), Permanent, "_OTHER", "marker: login expired"},
		{"marker: re-auth", errors.New("gateway asks to re-auth"), Permanent, "_OTHER", "marker: re-auth"},
		{"marker: unauthorized", errors.New("Unauthorized"), Permanent, "_OTHER", "marker: unauthorized"},
		{"marker: invalid api key text", errors.New("invalid api key"), Permanent, "_OTHER", "marker: invalid api key"},
		// transient
		{"429", api(429, "rate_limit_exceeded", "Rate limit reached"), Transient, "rate_limit_exceeded", "http 429 rate_limit_exceeded"},
		{"408", api(408, "", ""), Transient, "408", "http 408"},
		{"409", api(409, "", ""), Transient, "409", "http 409"},
		{"500", api(500, "", "internal"), Transient, "500", "http 500"},
		{"529 overloaded", api(529, "overloaded_error", "Overloaded"), Transient, "overloaded_error", "http 529 overloaded_error"},
		{"anthropic api_error", api(0, "api_error", ""), Transient, "api_error", "code api_error"},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, Transient, "connection_reset", "connection reset"},
		{"connection refused", &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, Transient, "connection_refused", "connection refused"},
		{"unexpected EOF", fmt.Errorf("stream: %w", io.ErrUnexpectedEOF), Transient, "unexpected_eof", "unexpected EOF"},
		{"net timeout", timeoutErr{}, Transient, "timeout", "timeout"},
		{"empty message: a dropped stream", errors.New(""), Transient, "_OTHER", "empty message"},
		{"pattern overloaded", errors.New("upstream overloaded, try later"), Transient, "_OTHER", "pattern: overloaded"},
		{"pattern rate limit", errors.New("Rate limit hit"), Transient, "_OTHER", "pattern: rate limit"},
		{"pattern 5xx", errors.New("bad gateway 502"), Transient, "_OTHER", "pattern: 502"},
		{"pattern service unavailable", errors.New("Service Unavailable"), Transient, "_OTHER", "pattern: service unavailable"},
		{"pattern connection error", errors.New("Connection error."), Transient, "_OTHER", "pattern: connection error"},
		{"pattern other side closed", errors.New("other side closed"), Transient, "_OTHER", "pattern: other side closed"},
		{"pattern fetch failed", errors.New("TypeError: fetch failed"), Transient, "_OTHER", "pattern: fetch failed"},
		{"pattern reset before headers", errors.New("upstream connect error or disconnect/reset before headers"), Transient, "_OTHER", "pattern: reset before headers"},
		{"pattern terminated", errors.New("terminated"), Transient, "_OTHER", "pattern: terminated"},
		// tls and other 4xx
		{"x509", &url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}}, Permanent, "tls_error", "tls"},
		{"x509 hostname", fmt.Errorf("dial: %w", x509.HostnameError{Host: "x"}), Permanent, "tls_error", "tls"},
		{"x509 invalid", x509.CertificateInvalidError{Reason: x509.Expired}, Permanent, "tls_error", "tls"},
		{"tls verification", &tls.CertificateVerificationError{Err: errors.New("bad")}, Permanent, "tls_error", "tls"},
		{"tls record", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, Permanent, "tls_error", "tls"},
		{"tls through an As method", asTLS{}, Permanent, "tls_error", "tls"},
		{"an As method that is not tls", asNothing{}, Unknown, "_OTHER", "unknown"},
		{"404", api(404, "not_found_error", "model not found"), Permanent, "not_found_error", "http 404 not_found_error"},
		{"400", api(400, "invalid_request_error", "messages: bad role"), Permanent, "invalid_request_error", "http 400 invalid_request_error"},
		// unknown
		{"unknown", errors.New("something odd"), Unknown, "_OTHER", "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Classify(tt.err)
			assert.Equal(t, tt.class, c.Class)
			assert.Equal(t, tt.typ, c.Type)
			assert.Equal(t, tt.reason, c.Reason)
		})
	}
}

// An error that matches two rules gets the first.
func TestClassifyOrder(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		class Class
	}{
		{"explicit beats everything", &Error{Class: Permanent, Err: api(503, "", "")}, Permanent},
		{"own timeout beats the context error it wraps", TimedOut(0, context.DeadlineExceeded), Transient},
		{"canceled beats a transient message", fmt.Errorf("503 overloaded: %w", context.Canceled), Canceled},
		{"panic beats the error it carries", failure.Recovered(api(503, "", ""), nil), Programming},
		{"overflow beats a 429", api(429, "context_length_exceeded", ""), ContextOverflow},
		{"overflow text beats quota", api(429, "insufficient_quota", "maximum context length"), ContextOverflow},
		{"quota beats 429", api(429, "insufficient_quota", "rate limit"), Fatal},
		{"401 beats a transient message", api(401, "", "service unavailable"), Permanent},
		{"a permanent marker beats a 503", api(503, "", "login expired"), Permanent},
		{"a permanent marker beats the transient pattern", errors.New("429: invalid api key"), Permanent},
		{"transient status beats other 4xx", api(429, "", ""), Transient},
		{"network error beats the empty-message rule", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, Transient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.class, Classify(tt.err).Class)
		})
	}
}

func TestClassifySeesThroughWrapping(t *testing.T) {
	inner := api(503, "", "overloaded")
	exceeded := retrypolicy.ExceededError{LastError: inner}
	c := Classify(fmt.Errorf("runtime: %w", exceeded))
	assert.Equal(t, Transient, c.Class, "failsafe-go's ExceededError is as transient as its last error")
	assert.Equal(t, "503", c.Type)

	failed := &Error{Layer: "session", Outcome: telemetry.OutcomeFailedExhausted, Err: api(401, "invalid_api_key", "")}
	assert.Equal(t, Permanent, Classify(failed).Class)
	assert.ErrorIs(t, failed, retrypolicy.ErrExceeded)
}

func TestRetryAfterCarried(t *testing.T) {
	c := Classify(&Error{StatusCode: 429, RetryAfter: 3 * time.Second})
	assert.Equal(t, 3*time.Second, c.RetryAfter)
	rej := Rejection(TypeCircuitOpen, "", 43*time.Second, circuitbreaker.ErrOpen)
	c = Classify(fmt.Errorf("tool: %w", rej))
	assert.Equal(t, Transient, c.Class)
	assert.Equal(t, 43*time.Second, c.RetryAfter)
	assert.ErrorIs(t, rej, circuitbreaker.ErrOpen)
}

func TestUserRulesRunFirst(t *testing.T) {
	errQuota := errors.New("search quota for today used up")
	cl := NewClassifier(func(err error) (Classification, bool) {
		if errors.Is(err, errQuota) {
			return Classification{Class: Fatal, Reason: "search quota"}, true
		}
		return Classification{}, false
	})
	c := cl.Classify(fmt.Errorf("search_docs: %w", errQuota))
	assert.Equal(t, Fatal, c.Class)
	assert.Equal(t, "_OTHER", c.Type)
	assert.Equal(t, Transient, cl.Classify(api(503, "", "")).Class, "the defaults still apply")
	var nilClassifier *Classifier
	assert.Equal(t, Transient, nilClassifier.Classify(api(503, "", "")).Class)
	assert.Equal(t, Classification{}, cl.Classify(nil))
}

// A deadline that is not the caller's is an inner timeout: retried. The
// caller's own cancellation is not.
func TestInnerDeadlineIsRetried(t *testing.T) {
	calls := 0
	_, err := failsafe.With[int](NewRetry[int](RetryConfig{MaxAttempts: 3})).Get(func() (int, error) {
		calls++
		return 0, context.DeadlineExceeded
	})
	require.Error(t, err)
	assert.Equal(t, 3, calls)
	var fe *Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, Transient, fe.Class)

	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	_, err = failsafe.With[int](NewRetry[int](RetryConfig{MaxAttempts: 3})).WithContext(ctx).Get(func() (int, error) {
		calls++
		cancel()
		return 0, context.Canceled
	})
	assert.Equal(t, 1, calls)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestRedactKnownShapes(t *testing.T) {
	for in, want := range map[string]string{
		"Incorrect API key provided: sk-proj-AbCdEf1234567890":   "Incorrect API key provided: sk-[REDACTED]",
		"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig": "Authorization: Bearer [REDACTED]",
		`{"api_key": "abcd1234efgh"}`:                            `{"api_key": "[REDACTED]"}`,
		"https://x/search?q=go&token=s3cr3tvalue&page=2":         "https://x/search?q=go&token=[REDACTED]&page=2",
		"anthropic key sk-ant-api03-abcdefghijklmnop rejected":   "anthropic key sk-ant-[REDACTED] rejected",
		"nothing secret here: 503 overloaded":                    "nothing secret here: 503 overloaded",
	} {
		assert.Equal(t, want, Redact(in))
	}
}

func TestRedactKeepsPlainMessages(t *testing.T) {
	for _, s := range []string{"503 overloaded", "", "connection reset by peer", "Rate limit reached for requests"} {
		assert.Equal(t, s, Redact(s))
	}
	assert.Equal(t, "x SK-[REDACTED]", Redact("x SK-ABCDEF123456"), "case does not hide a key")
}

// A provider's code is its input: one that carries a key, or is no short
// identifier, is written neither into error.type nor into the reason.
func TestUnsafeCodeIsNotWritten(t *testing.T) {
	for _, code := range []string{"sk-proj-abcdefghijklmnop0123", "invalid key: Bearer abcdefghijklmnopqrstuvwxyz", strings.Repeat("x", 65)} {
		c := Classify(&Error{StatusCode: 401, Code: code, Message: "no"})
		assert.Equal(t, Permanent, c.Class)
		assert.Equal(t, "401", c.Type, code)
		assert.NotContains(t, c.Reason, code)
		assert.NotContains(t, (&Error{StatusCode: 401, Code: code}).Error(), "abcdefghijklmnop")
	}
	assert.Equal(t, "invalid_api_key", Classify(&Error{StatusCode: 401, Code: "invalid_api_key"}).Type)
}

// asTLS answers errors.As for a TLS record failure, as a wrapper that
// converts its errors may.
type asTLS struct{}

func (asTLS) Error() string { return "handshake went wrong" }
func (asTLS) As(target any) bool {
	if p, ok := target.(*tls.RecordHeaderError); ok {
		*p = tls.RecordHeaderError{Msg: "bad record"}
		return true
	}
	return false
}

// asNothing has an As method that answers nothing.
type asNothing struct{}

func (asNothing) Error() string { return "something odd" }
func (asNothing) As(any) bool   { return false }
