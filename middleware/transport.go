package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
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
// its OpenAI- or Anthropic-style error body becomes a *policies.Error
// (code, message, Retry-After), which the classifier reads. When the layer
// gives up on such an answer, the caller still gets the response itself, as
// base returned it, so that an SDK above produces its own error. Requests
// with a body are retried only when they can be rewound (GetBody).
//
// Each request is a leaf call, counted in retrace.calls. A successful
// answer's body is watched as [SDK] watches it: an event stream without its
// terminator fails the reader with a *policies.Error of type stream_dropped, and without a
// retry policy the request's span ends with the body. The credentials in
// each request's headers are secrets of the call. To see the requests of an
// SDK's own retries, use [SDK], which also knows where each request stands
// among them.
func Transport(base http.RoundTripper, layer string, opts ...Option) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	cfg := newConfig(opts)
	return newTransport(base, layer, cfg, newRequest(layer, cfg))
}

// transport is Transport's and SDK's: a request layer (request.go) around
// the send of each request, and what happens at its edges: the request's
// credentials become secrets of the call, the SDK above is told what not to
// resend, and a successful answer's body is watched (body.go).
type transport struct {
	base       http.RoundTripper
	h          Handler[*exchange, *http.Response]
	classifier *policies.Classifier // the layer's: what it classifies as not retryable, the SDK is told not to resend
}

// newTransport builds the request layer named layer with role r (Transport's
// or an SDK's) around the transport's send.
func newTransport(base http.RoundTripper, layer string, cfg config, r role[*exchange, *http.Response]) *transport {
	t := &transport{base: base, classifier: cfg.classifier}
	t.h = newLayer[*exchange, *http.Response](layer, cfg, Spec[*http.Response]{Policies: cfg.httpPolicies}, r).middleware()(t.send)
	return t
}

// httpFailure is a response that failed: the layer sees the error, the
// caller gets the response.
type httpFailure struct {
	resp *http.Response
	err  *policies.Error
}

func (e *httpFailure) Error() string { return e.err.Error() }
func (e *httpFailure) Unwrap() error { return e.err }

// exchange is one request as its layer carries it across its attempts:
// the request, the SDK's next handler (nil under Transport: the base
// transport sends it), the last failed response, so that a retry can close
// it, and, once the layer hands its span over, how the answer's body ends it.
type exchange struct {
	req   *http.Request
	next  func(*http.Request) (*http.Response, error)
	resp  *http.Response
	end   func(error) // ends the request's span when the answer's body ends; nil when it has ended
	event func(error) // tells the layers above of an error event in the answer's stream
	// resend is the request's place among an SDK's retries of it, from 0
	// (sdk.go); 0 for any other request.
	resend int
}

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
	x := &exchange{req: req, next: next}
	resp, err := t.h(ctx, x)
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
