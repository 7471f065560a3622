package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// Transport returns an http.RoundTripper that sends every request through a
// retrace layer named layer (usually "http"), with the policies given by
// [WithHTTPPolicies]. Each physical request is a span of kind Client named
// after its method ("POST"), born with http.request.method, url.full
// (without credentials, query values redacted), server.address and
// server.port, so that a sampler sees them, and ended with
// http.response.status_code; headers, which hold API keys, are never
// recorded. With a retry policy the layer span, named layer, covers the
// request and its attempts are the Client spans, numbered by
// http.request.resend_count; without one the layer span is the request's.
// The trace context is injected into each request with the global
// propagator.
//
// An answer with status 400 or more is a failure for the layer's policies:
// its OpenAI- or Anthropic-style error body becomes a *policies.APIError
// (code, message, Retry-After), which the classifier reads. When the layer
// gives up on such an answer, the caller still gets the response itself, as
// base returned it, so that an SDK above produces its own error. Requests
// with a body are retried only when they can be rewound (GetBody).
//
// Each request is a leaf call, counted in retrace.calls. A successful
// answer's body is watched as [SDK] watches it: an event stream without its
// terminator fails the reader with a *policies.StreamError, and without a
// retry policy the request's span ends with the body. The credentials in
// each request's headers are secrets of the call. To see the requests of an
// SDK's own retries, use [SDK], which also knows where each request stands
// among them.
func Transport(base http.RoundTripper, layer string, opts ...Option) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	opts = append([]Option{optionFunc(func(c *config) { c.http = true })}, opts...)
	cfg := newConfig(opts)
	t := &transport{base: base, classifier: cfg.classifier}
	t.h = PoliciesWith[*http.Request, *http.Response](layer, opts, cfg.httpPolicies...)(t.attempt)
	return t
}

// RequestMiddleware is a request middleware of the shape the SDKs Stainless
// builds take (openai-go's and anthropic-sdk-go's option.WithMiddleware, and
// their option.Middleware is the same type): it gets each physical request
// the SDK makes, inside the SDK's retry loop, and the next handler.
type RequestMiddleware = func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error)

// SDK returns a request middleware for an SDK built by Stainless, openai-go's
// and anthropic-sdk-go's option.WithMiddleware among them, without
// importing either:
//
//	client := openai.NewClient(option.WithMaxRetries(2),
//		option.WithMiddleware(middleware.SDK("openai-go", 2, opts...)))
//
// The middleware runs inside the SDK's own retry loop, once per physical
// request. Each request is a span of kind Client, as [Transport] makes them,
// with http.request.resend_count read from the SDK's X-Stainless-Retry-Count
// header, the failure's retrace.error.class and error.type when it failed,
// and each one is a leaf call counted in retrace.calls. maxRetries is the
// client's setting (option.WithMaxRetries; openai-go's default is 2): the
// SDK's loop is named sdk in the nested-retry event ("session(4) ×
// openai-go(3)") and its maxRetries+1 attempts count in
// retrace.calls.worst_case before they happen. The worst case relies on the
// retry-count header: a request without it counts as a first one. Do not
// also declare the SDK's attempts with [WithInnerAttempts] on the layer
// above; where that is done anyway, the layer's declaration counts.
//
// It takes part in the call as retrace's own providers do:
//
//   - what retrace classifies as not retryable (a spent quota, a rejected
//     key, a context overflow) the SDK is told not to resend
//     (x-should-retry: false, which Stainless-built SDKs honour over the
//     status): one request, not the SDK's maxRetries+1;
//   - a successful answer's span ends with its body, read to its end or
//     closed; an event stream that ends without its protocol's terminator
//     (OpenAI's [DONE], Anthropic's message_stop, the Responses API's
//     response.completed), or whose connection breaks, fails the user's
//     stream reader with a *policies.StreamError (error.type
//     stream_dropped, Transient), so that a short answer never passes for a
//     whole one; an error event in the stream is recorded on the span;
//   - a failure it read is carried up: a layer above whose handler returns
//     an error that says nothing of itself (an SDK's error made of an
//     event's text) takes this classification instead of guessing again;
//   - without WithTracerProvider or WithMeterProvider it records where the
//     enclosing retrace layer does (else the global providers), so that
//     its spans are in the caller's trace; a request whose span is not
//     recorded while the trace is, is not counted in retrace.calls but in
//     retrace.calls.untraced;
//   - the credentials it sees (Authorization, x-api-key, api-key,
//     x-goog-api-key) are secrets of the whole call: an answer that echoes
//     the key is redacted by exact value on every span and error.
//
// A body the caller never reads to its end nor closes leaves its span open,
// as it leaves its connection.
func SDK(sdk string, maxRetries int, opts ...Option) RequestMiddleware {
	opts = append([]Option{optionFunc(func(c *config) {
		c.http, c.sdkName, c.sdkAttempts = true, sdk, max(maxRetries, 0)+1
	})}, opts...)
	cfg := newConfig(opts)
	t := &transport{classifier: cfg.classifier}
	t.h = PoliciesWith[*http.Request, *http.Response]("http", opts, cfg.httpPolicies...)(t.attempt)
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		return t.roundTrip(req, next)
	}
}

type transport struct {
	base       http.RoundTripper
	h          Handler[*http.Request, *http.Response]
	classifier *policies.Classifier // the layer's: what it classifies as not retryable, the SDK is told not to resend
}

// httpFailure is a response that failed: the layer sees the error, the
// caller gets the response.
type httpFailure struct {
	resp *http.Response
	err  *policies.APIError
}

func (e *httpFailure) Error() string { return e.err.Error() }
func (e *httpFailure) Unwrap() error { return e.err }

// exchange is one request's state across its attempts: the last failed
// response, so that a retry can close it, and the SDK's next handler.
type exchange struct {
	resp  *http.Response
	next  func(*http.Request) (*http.Response, error)
	end   func(error) // ends the request's span when the answer's body ends; nil when it has ended
	event func(error) // tells the layers above of an error event in the answer's stream
}

type exchangeKey struct{}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.roundTrip(req, nil)
}

func (t *transport) roundTrip(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	ctx := req.Context()
	if creds := credentials(req.Header); len(creds) > 0 {
		// The request's credentials are secrets of the call, whoever
		// configured them (a user's own SDK client): an answer that echoes
		// the key is redacted on this span and on every layer's above it.
		ctx = engine.WithSecrets(ctx, creds...)
		if f := frameFrom(ctx); f != nil {
			f.root.learn(creds)
		}
	}
	if err := resendRefused(ctx); err != nil {
		return nil, err
	}
	x := &exchange{next: next}
	resp, err := t.h(context.WithValue(ctx, exchangeKey{}, x), req)
	var hf *httpFailure
	if err != nil && errors.As(err, &hf) && hf.resp != nil {
		if !t.classifier.Classify(err).Class.Retryable() {
			// Stainless-built SDKs (openai-go, anthropic-sdk-go) honour
			// x-should-retry over the status: an SDK must not resend what
			// retrace knows no resend can fix (a spent quota, a rejected
			// key, a context overflow).
			hf.resp.Header.Set(shouldRetry, "false")
		}
		return hf.resp, nil
	}
	if err != nil {
		if resp != nil {
			_ = resp.Body.Close()
		}
		return resp, err
	}
	wrapBody(req.Context(), resp, x.end, x.event)
	return resp, nil
}

// resendRefused is the error of a request that must not be sent: beneath a
// layer that declared the retry loop its handler runs (WithInnerAttempts,
// WithInnerRetries: an SDK's, or a framework's such as genkit's Retry), the
// requests are that loop's attempts of one request, and one of them already
// failed in a way no resend can fix (a spent quota, a rejected key). A loop
// that retrace does not drive, and that reads no x-should-retry, is kept
// from sending it again: the provider sees one request, and the loop gets
// the same class back at once, without a request.
func resendRefused(ctx context.Context) error {
	f := frameFrom(ctx)
	if f == nil || !f.perAttempt {
		return nil
	}
	b := f.failedBeneath.Load()
	if b == nil {
		return nil
	}
	cls := b.cls
	if cls.Class.Retryable() || cls.Class == policies.Canceled || cls.Class == policies.Unknown {
		return nil
	}
	return &policies.Error{Class: cls.Class, Type: cls.Type, RetryAfter: cls.RetryAfter,
		Err: fmt.Errorf("not sent: an earlier attempt of this request failed (%s %s) and no resend can succeed", cls.Class, cls.Type)}
}

// shouldRetry is the response header in which a server, or a middleware
// beneath an SDK, tells a Stainless-built SDK whether to retry.
const shouldRetry = "X-Should-Retry"

// credentials are the values of a request's credential headers: a bearer
// or basic token in Authorization, x-api-key (Anthropic's), api-key
// (Azure OpenAI's), x-goog-api-key (Google's).
func credentials(h http.Header) []string {
	var out []string
	if v := strings.TrimSpace(h.Get("Authorization")); v != "" {
		if _, token, ok := strings.Cut(v, " "); ok {
			v = strings.TrimSpace(token)
		}
		out = append(out, v)
	}
	for _, k := range []string{"X-Api-Key", "Api-Key", "X-Goog-Api-Key"} {
		if v := strings.TrimSpace(h.Get(k)); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func (t *transport) attempt(ctx context.Context, req *http.Request) (*http.Response, error) {
	a, _ := AttemptFrom(ctx)
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	if x == nil {
		x = &exchange{}
	}
	if x.resp != nil {
		_ = x.resp.Body.Close() // a retry: the previous answer will not be returned
		x.resp = nil
	}
	r := req.Clone(ctx)
	if a.N > 1 && req.Body != nil && req.Body != http.NoBody {
		if err := unrewindable(req); err != nil {
			return nil, err
		}
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(r.Header))
	var resp *http.Response
	var err error
	if x.next != nil {
		resp, err = x.next(r)
	} else {
		resp, err = t.base.RoundTrip(r)
	}
	if err != nil {
		return nil, err
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(telemetry.HTTPStatusCode.Int(resp.StatusCode))
	}
	if resp.StatusCode < 400 {
		return resp, nil
	}
	x.resp = resp
	return nil, &httpFailure{resp: resp, err: policies.APIErrorFrom(resp)}
}

// unrewindable is the error of a request that cannot be sent again: its
// body cannot be rewound (GetBody is nil). req is any layer's request; only
// an *http.Request can be refused.
func unrewindable(req any) error {
	r, ok := req.(*http.Request)
	if !ok || r == nil || r.Body == nil || r.Body == http.NoBody || r.GetBody != nil {
		return nil
	}
	return &policies.Error{Class: policies.Permanent, Type: "body_not_rewindable",
		Err: errors.New("http: cannot retry a request whose body cannot be rewound (GetBody is nil)")}
}

// requestSpan is the name and start options of a physical request's span:
// kind Client, named after the method, with the attributes a sampler reads.
func requestSpan[Req any](req Req, resend int, attrs []attribute.KeyValue) (string, []trace.SpanStartOption) {
	r, ok := any(req).(*http.Request)
	if !ok || r == nil || r.URL == nil {
		return "HTTP", []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)}
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	kv := make([]attribute.KeyValue, 0, len(attrs)+5)
	kv = append(kv, attrs...)
	kv = append(kv,
		telemetry.HTTPMethod.String(method),
		telemetry.URLFull.String(safeURL(r.URL)),
		telemetry.ServerAddress.String(r.URL.Hostname()),
	)
	if port := serverPort(r.URL); port > 0 {
		kv = append(kv, telemetry.ServerPort.Int(port))
	}
	if resend >= 0 {
		kv = append(kv, telemetry.HTTPResendCount.Int(resend))
	}
	return method, []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(kv...)}
}

// safeURL is u without credentials or fragment, with every query value
// replaced by REDACTED, and every path segment and query parameter name
// that is a secret: a query is where some providers take their API key
// (?key=…), a path where others do (/v1/keys/sk-…/chat) and where a
// webhook's token is, and the rest says what was asked.
//
// A segment or a name is a secret when policies.Redact, reading it as a part
// of a URL's path, would redact any of it: a key, a value of a secret's name,
// an opaque token (a run of 16 letters and digits with both), but not an
// object ID, a UUID, a model name (gpt-4o-mini-2024-07-18) or a date. A
// webhook's token is one whatever it holds: Slack's
// /services/T…/B…/{token} and Discord's /webhooks/{id}/{token}.
func safeURL(u *url.URL) string {
	c := *u
	c.User, c.Fragment, c.RawFragment = nil, "", ""
	secret := func(s string) bool {
		p := "https://h/" + s // s where a URL's path holds it, as Redact reads one
		return policies.Redact(p) != p
	}
	if c.Opaque == "" && c.Path != "" {
		segs := strings.Split(c.EscapedPath(), "/")
		changed := false
		// Backwards: a webhook's rule reads the segments before, as they were.
		for i := len(segs) - 1; i >= 0; i-- {
			seg, err := url.PathUnescape(segs[i])
			if err != nil {
				seg = segs[i]
			}
			slack := i >= 3 && segs[i-3] == "services" && strings.HasPrefix(segs[i-2], "T") && strings.HasPrefix(segs[i-1], "B")
			discord := i >= 2 && segs[i-2] == "webhooks" && segs[i-1] != "" && strings.Trim(segs[i-1], "0123456789") == ""
			if seg != "" && (slack || discord || secret(seg)) {
				segs[i], changed = "REDACTED", true
			}
		}
		if changed {
			c.RawPath = strings.Join(segs, "/")
			c.Path, _ = url.PathUnescape(c.RawPath)
		}
	}
	if c.RawQuery != "" {
		q, err := url.ParseQuery(c.RawQuery)
		if err != nil {
			c.RawQuery = "REDACTED"
		} else {
			var hidden []string // the values of the names that are secrets
			for k, vs := range q {
				for i := range vs {
					vs[i] = "REDACTED"
				}
				q[k] = vs
				if secret(k) {
					delete(q, k)
					hidden = append(hidden, vs...)
				}
			}
			if len(hidden) > 0 {
				q["REDACTED"] = append(q["REDACTED"], hidden...)
			}
			c.RawQuery = q.Encode()
		}
	}
	return c.String()
}

// serverPort is the port the request goes to, the scheme's default when
// the URL names none.
func serverPort(u *url.URL) int {
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return 0
		}
		return n
	}
	switch u.Scheme {
	case "https":
		return 443
	case "http":
		return 80
	}
	return 0
}

// APIErrorFrom reads an error answer. It is [policies.APIErrorFrom], the
// one decoder of provider answers, where it is now.
//
// Deprecated: use policies.APIErrorFrom.
func APIErrorFrom(resp *http.Response) *policies.APIError { return policies.APIErrorFrom(resp) }
