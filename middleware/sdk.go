package middleware

import (
	"net/http"
	"strconv"
)

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
//     stream reader with a *policies.Error (error.type
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
	cfg := newConfig(opts)
	r := &sdkRequest{request: *newRequest("http", cfg), sdk: sdk, attempts: max(maxRetries, 0) + 1}
	return newTransport(nil, "http", cfg, r).roundTrip
}

// sdkRetryCount is the header in which Stainless-built SDKs (openai-go,
// anthropic-sdk-go) number a request among their retries, from 0.
const sdkRetryCount = "X-Stainless-Retry-Count"

// sdkRequest is the role of an SDK's request layer: a physical request, as
// Transport's are, that also stands for the SDK's retry loop in the
// nesting, named after the SDK, with the SDK's attempts.
type sdkRequest struct {
	request  // the rest is a request's
	sdk      string
	attempts int
}

// place places the request among the layers as the SDK's retry loop,
// unless the layer above already declared the SDK's attempts
// (WithInnerAttempts), and reads the request's place among the SDK's
// retries (0 when the SDK does not say).
func (s *sdkRequest) place(c *call[*exchange, *http.Response], parent *frame) {
	if n, err := strconv.Atoi(c.req.req.Header.Get(sdkRetryCount)); err == nil && n > 0 {
		c.req.resend = n
	}
	if parent != nil && parent.perAttempt {
		// The layer above counts the SDK's attempts: each request is one leaf.
		c.frame.init(parent, c.l.name, 1, false, &c.root)
		return
	}
	c.frame.init(parent, s.sdk, s.attempts, s.attempts > 1, &c.root)
}
