package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// Transport returns an http.RoundTripper that sends every request through a
// retrace layer named layer (usually "http") with the policies ps. Each HTTP
// request is a span of kind Client, carrying the method, the URL without its
// query, and the status; headers, which hold API keys, are never recorded.
// The trace context is injected into the request with the global propagator.
//
// An answer with status 400 or more is a failure for the layer's policies:
// its OpenAI- or Anthropic-style error body becomes a *policies.APIError
// (code, message, Retry-After), which the classifier reads. When the layer
// gives up on such an answer, the caller still gets the response itself, as
// base returned it, so that an SDK above produces its own error. Requests
// with a body are retried only when they can be rewound (GetBody).
//
// Put it in the http.Client of an SDK to see the requests an SDK's own
// retries make: each one is a leaf span, counted in retrace.calls.
func Transport(base http.RoundTripper, layer string, opts []Option, ps ...failsafe.Policy[*http.Response]) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	opts = append([]Option{WithSpanKind(trace.SpanKindClient), WithSpanName("HTTP")}, opts...)
	t := &transport{base: base}
	t.h = PoliciesWith[*http.Request, *http.Response](layer, opts, ps...)(t.attempt)
	return t
}

type transport struct {
	base http.RoundTripper
	h    Handler[*http.Request, *http.Response]
}

// httpFailure is a response that failed: the layer sees the error, the
// caller gets the response.
type httpFailure struct {
	resp *http.Response
	err  *policies.APIError
}

func (e *httpFailure) Error() string { return e.err.Error() }
func (e *httpFailure) Unwrap() error { return e.err }

// failed holds the last failed response of a request, so that a retry can
// close it.
type failed struct{ resp *http.Response }

type failedKey struct{}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.h(context.WithValue(req.Context(), failedKey{}, &failed{}), req)
	var hf *httpFailure
	if err != nil && errors.As(err, &hf) && hf.resp != nil {
		return hf.resp, nil
	}
	if err != nil && resp != nil {
		_ = resp.Body.Close()
	}
	return resp, err
}

func (t *transport) attempt(ctx context.Context, req *http.Request) (*http.Response, error) {
	a, _ := AttemptFrom(ctx)
	last, _ := ctx.Value(failedKey{}).(*failed)
	if last != nil && last.resp != nil {
		_ = last.resp.Body.Close() // a retry: the previous answer will not be returned
		last.resp = nil
	}
	r := req.Clone(ctx)
	if a.N > 1 && req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, &policies.Error{Class: policies.Permanent, Type: "body_not_rewindable",
				Err: errors.New("http: cannot retry a request whose body cannot be rewound (GetBody is nil)")}
		}
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	span := trace.SpanFromContext(ctx)
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(r.Header))
	if span.IsRecording() {
		u := *r.URL
		u.RawQuery, u.User, u.Fragment = "", nil, ""
		span.SetName("HTTP " + r.Method)
		span.SetAttributes(
			telemetry.HTTPMethod.String(r.Method),
			telemetry.URLFull.String(u.String()),
			telemetry.ServerAddress.String(r.URL.Hostname()),
		)
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if span.IsRecording() {
		span.SetAttributes(telemetry.HTTPStatusCode.Int(resp.StatusCode))
	}
	if resp.StatusCode < 400 {
		return resp, nil
	}
	if last != nil {
		last.resp = resp
	}
	return nil, &httpFailure{resp: resp, err: APIErrorFrom(resp)}
}

// APIErrorFrom reads an error answer: its status, Retry-After, and an
// OpenAI- or Anthropic-style body ({"error": {"type", "code", "message"}},
// or {"error": "message"}). It reads at most 64 KiB of the body and puts
// what it read back, so the response can still be read in full. The message
// is cut to at most 1 KiB, at a character boundary, the cut marked with "…":
// it is the provider's text, of any length, and it goes into errors, spans
// and the history sent with later requests.
func APIErrorFrom(resp *http.Response) *policies.APIError {
	e := &policies.APIError{StatusCode: resp.StatusCode, RetryAfter: engine.ParseRetryAfter(resp.Header, time.Now())}
	if resp.Body == nil {
		return e
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	if err != nil {
		return e
	}
	var body struct {
		Error json.RawMessage `json:"error"`
		Type  string          `json:"type"`
	}
	if json.Unmarshal(head, &body) != nil || len(body.Error) == 0 {
		return e
	}
	var detail struct {
		Type    string `json:"type"`
		Code    any    `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body.Error, &detail) != nil {
		// {"error": "text"}
		var text string
		if json.Unmarshal(body.Error, &text) == nil {
			e.Message = engine.Truncate(text, maxMessage)
		}
		return e
	}
	e.Message = engine.Truncate(detail.Message, maxMessage)
	if code, ok := detail.Code.(string); ok && code != "" {
		e.Code = code
	} else {
		e.Code = strings.TrimSpace(detail.Type)
	}
	return e
}

// maxMessage is the longest message APIErrorFrom keeps, in bytes.
const maxMessage = 1 << 10
