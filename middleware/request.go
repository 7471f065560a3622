package middleware

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// request is the role of a layer whose calls are physical HTTP requests
// (Transport's): without a retry the layer span is the request's, a CLIENT
// span named after its method and born with the attributes a sampler reads,
// and it ends when the answer's body does; with one, the layer span is
// named after the layer and each attempt is a request's span. A request
// whose body cannot be rewound is refused a retry.
type request struct {
	named[*exchange, *http.Response]                      // the layer span's name when the layer retries
	attrs                            []attribute.KeyValue // the layer's own (WithAttributes), on every request span
}

func newRequest(layer string, cfg config) *request {
	return &request{named: *newNamed[*exchange, *http.Response](layer, cfg), attrs: cfg.attrs}
}

func (r *request) place(c *call[*exchange, *http.Response], parent *frame) { c.placeFrame(parent) }

func (r *request) start(ctx context.Context, c *call[*exchange, *http.Response], parent *frame) (context.Context, trace.Span) {
	if c.l.retrying() {
		return r.named.start(ctx, c, parent)
	}
	// The layer call is the physical request: its span is the request's.
	name, opts := requestSpan(c.req.req, c.req.resend, r.attrs)
	return c.tracer.Start(&c.fctx, name, opts...)
}

func (r *request) attempt(ctx context.Context, c *call[*exchange, *http.Response], n int) (context.Context, trace.Span) {
	// Each attempt is a physical request, resent n-1 times.
	name, opts := requestSpan(c.req.req, n-1, nil)
	return c.tracer.Start(ctx, name, opts...)
}

func (r *request) refusal(x *exchange) error { return unrewindable(x.req) }

func (r *request) keep(resp *http.Response, cancel context.CancelFunc) bool {
	return keepUntilRead(resp, cancel)
}

// end reports the request's worst case to the enclosing layer, unless it is
// an SDK's resend of a request (whose worst case its first request
// reported), and ends the call; the span of a successful request the layer
// did not retry is handed to the answer's body.
func (r *request) end(ctx context.Context, c *call[*exchange, *http.Response], v ending[*http.Response]) {
	if c.req.resend == 0 {
		c.frame.reportWorst()
	}
	if v.err != nil || c.l.retrying() {
		c.finish(ctx, v)
		return
	}
	r.handOff(ctx, c, v.attempts)
}

// handOff hands the span of a request the layer did not retry to the
// answer's body: it ends when the body is read to its end or closed, and
// says how the body ended.
func (r *request) handOff(ctx context.Context, c *call[*exchange, *http.Response], attempts int) {
	c.req.end = func(bodyErr error) { endBody(ctx, c, bodyErr, attempts) }
	c.req.event = func(eventErr error) {
		// An error event: the SDK above reports it in words of its own;
		// the layers above it read this classification.
		cls := c.classify(ctx, eventErr)
		c.frame.endedBeneath(c.beneath(eventErr, cls))
	}
}

// endBody ends a request's span when its answer's body has ended: with
// success, or with the failure the body ended with (a stream dropped, the
// caller's end, an error event the provider sent).
func endBody(ctx context.Context, c *call[*exchange, *http.Response], err error, attempts int) {
	v := ending[*http.Response]{outcome: telemetry.OutcomeSuccess, attempts: attempts, err: err}
	if err != nil {
		v.cls = c.classify(ctx, err)
		v.outcome = c.l.outcome(ctx, c, err, v.cls)
		c.frame.endedBeneath(c.beneath(err, v.cls))
	}
	c.finish(ctx, v)
}

// send is the handler of a request layer: one physical request, sent by
// the SDK's next handler or the base transport, with the trace context
// injected. An answer with status 400 or more is a failure for the layer's
// policies (an *httpFailure, which keeps the response for the caller).
func (t *transport) send(ctx context.Context, x *exchange) (*http.Response, error) {
	a, _ := AttemptFrom(ctx)
	req := x.req
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
		span.SetAttributes(semconv.HTTPStatusCode.Int(resp.StatusCode))
	}
	if resp.StatusCode < 400 {
		return resp, nil
	}
	x.resp = resp
	return nil, &httpFailure{resp: resp, err: policies.ErrorFrom(resp)}
}

// unrewindable is the error of a request that cannot be sent again: its
// body cannot be rewound (GetBody is nil).
func unrewindable(r *http.Request) error {
	if r == nil || r.Body == nil || r.Body == http.NoBody || r.GetBody != nil {
		return nil
	}
	return &policies.Error{Class: policies.Permanent, Type: "body_not_rewindable",
		Err: errors.New("http: cannot retry a request whose body cannot be rewound (GetBody is nil)")}
}

// requestSpan is the name and start options of a physical request's span:
// kind Client, named after the method, with the attributes a sampler reads.
func requestSpan(r *http.Request, resend int, attrs []attribute.KeyValue) (string, []trace.SpanStartOption) {
	if r == nil || r.URL == nil {
		return "HTTP", []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)}
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	kv := make([]attribute.KeyValue, 0, len(attrs)+5)
	kv = append(kv, attrs...)
	kv = append(kv, semconv.HTTPMethod.
		String(method), semconv.URLFull.
		String(safeURL(r.URL)), semconv.ServerAddress.
		String(r.URL.Hostname()),
	)
	if port := serverPort(r.URL); port > 0 {
		kv = append(kv, semconv.ServerPort.Int(port))
	}
	if resend >= 0 {
		kv = append(kv, semconv.HTTPResendCount.Int(resend))
	}
	return method, []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(kv...)}
}

// safeURL is u without credentials or fragment, with every query value
// replaced by REDACTED, and every path segment and query parameter name
// that is a secret: a query is where some providers take their API key
// (?key=…), a path where others do (/v1/keys/sk-…/chat) and where a
// webhook's token is, and the rest says what was asked.
//
// A segment or a name is a secret when redact.IsSecret, reading it as a part
// of a URL's path, would redact any of it: a key, a value of a secret's name,
// an opaque token (a run of 16 letters and digits with both), but not an
// object ID, a UUID, a model name (gpt-4o-mini-2024-07-18) or a date. A
// webhook's token is one whatever it holds: Slack's
// /services/T…/B…/{token} and Discord's /webhooks/{id}/{token}.
func safeURL(u *url.URL) string {
	c := *u
	c.User, c.Fragment, c.RawFragment = nil, "", ""
	secret := func(s string) bool {
		return redact.IsSecret("https://h/"+s, nil) // s where a URL's path holds it, as the patterns read one
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
