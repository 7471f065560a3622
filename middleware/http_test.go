package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

// httpAnswer is what httpServer answers to one request.
type httpAnswer struct {
	status int
	body   string
	header map[string]string
}

// httpServer is a server on 127.0.0.1 that gives its answers in order (the
// last one again once they run out) and records the body of every request.
type httpServer struct {
	*httptest.Server
	answers []httpAnswer
	mu      sync.Mutex
	bodies  []string
}

func newHTTPServer(t *testing.T, answers ...httpAnswer) *httpServer {
	t.Helper()
	s := &httpServer{answers: answers}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusTeapot)
			return
		}
		s.mu.Lock()
		s.bodies = append(s.bodies, string(body))
		a := s.answers[min(len(s.bodies), len(s.answers))-1]
		s.mu.Unlock()
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(s.Close)
	return s
}

// requests returns the bodies of the requests the server received.
func (s *httpServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

// closeTracker is a base transport that records the responses it returns,
// to tell which of their bodies were closed.
type closeTracker struct {
	base http.RoundTripper
	mu   sync.Mutex
	seen []*trackedBody
}

type trackedBody struct {
	io.ReadCloser
	status int
	closed atomic.Bool
}

func (b *trackedBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}

func (c *closeTracker) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	b := &trackedBody{ReadCloser: resp.Body, status: resp.StatusCode}
	resp.Body = b
	c.mu.Lock()
	c.seen = append(c.seen, b)
	c.mu.Unlock()
	return resp, nil
}

// closed returns, for each response base returned, whether its body is
// closed.
func (c *closeTracker) closed() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]bool, len(c.seen))
	for i, b := range c.seen {
		out[i] = b.closed.Load()
	}
	return out
}

// httpClient returns a client whose transport is middleware.Transport over
// srv's own transport (watched by a closeTracker) with the policies ps, and
// the recorder of its spans.
func httpClient(t *testing.T, srv *httpServer, ps ...failsafe.Policy[*http.Response]) (*http.Client, *closeTracker, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	base := &closeTracker{base: srv.Client().Transport}
	rt := middleware.Transport(base, "http", middleware.WithTracerProvider(tp), middleware.WithHTTPPolicies(ps...))
	return &http.Client{Transport: rt}, base, rec
}

// retry3 is a retry of 3 attempts without delay.
func retry3() failsafe.Policy[*http.Response] {
	return policies.NewRetry[*http.Response](policies.RetryConfig{MaxAttempts: 3})
}

func spanAttr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// requestSpans are the spans that describe an HTTP request: those with
// http.request.method, in the order they ended.
func requestSpans(rec *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if _, ok := spanAttr(s, "http.request.method"); ok {
			out = append(out, s)
		}
	}
	return out
}

// rootSpan is the span of the whole call: the one without a parent.
func rootSpan(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	var roots []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if !s.Parent().IsValid() {
			roots = append(roots, s)
		}
	}
	require.Len(t, roots, 1, "one call, one root span")
	return roots[0]
}

// assertRequestSpans checks the spans of the requests a call made: one per
// request, each a client span named after the method, with the method, the
// server's address and port, the URL without its fragment or credentials
// and with its query values redacted, its place among the resends, and the
// status it got.
func assertRequestSpans(t *testing.T, rec *tracetest.SpanRecorder, srv *httpServer, method string, statuses ...int) {
	t.Helper()
	spans := requestSpans(rec)
	require.Len(t, spans, len(statuses), "a span per request")
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	for i, s := range spans {
		assert.Equal(t, trace.SpanKindClient, s.SpanKind(), "request %d", i+1)
		assert.Equal(t, method, s.Name(), "a request span is named after its method")
		m, _ := spanAttr(s, "http.request.method")
		assert.Equal(t, method, m.AsString())
		addr, _ := spanAttr(s, "server.address")
		assert.Equal(t, "127.0.0.1", addr.AsString())
		port, _ := spanAttr(s, "server.port")
		assert.Equal(t, u.Port(), strconv.FormatInt(port.AsInt64(), 10))
		full, _ := spanAttr(s, "url.full")
		assert.Equal(t, srv.URL+"/v1/chat?api_key=REDACTED&x=REDACTED", full.AsString(), "url.full without fragment or user, query values redacted")
		assert.NotContains(t, full.AsString(), "sk-secret")
		resend, ok := spanAttr(s, "http.request.resend_count")
		require.True(t, ok, "request %d has no http.request.resend_count", i+1)
		assert.Equal(t, int64(i), resend.AsInt64())
		status, ok := spanAttr(s, "http.response.status_code")
		require.True(t, ok, "request %d has no http.response.status_code", i+1)
		assert.Equal(t, int64(statuses[i]), status.AsInt64(), "request %d", i+1)
	}
	root := rootSpan(t, rec)
	if len(spans) > 1 || root.SpanContext().SpanID() != spans[0].SpanContext().SpanID() {
		assert.Equal(t, trace.SpanKindInternal, root.SpanKind(), "a retrying layer's span covers its requests")
		assert.Equal(t, "http", root.Name(), "and is named after the layer")
	}
}

// chatURL is the URL the tests call: with credentials, a query holding a
// key, and a fragment, none of which may reach a span.
func chatURL(srv *httpServer) string {
	return strings.Replace(srv.URL, "http://", "http://user:sk-secret-pass@", 1) + "/v1/chat?api_key=sk-secret-1&x=1#frag"
}

func TestTransportRetriesA503AndReturnsTheFinalAnswer(t *testing.T) {
	srv := newHTTPServer(t,
		httpAnswer{status: 503, body: `{"error":{"type":"overloaded_error","message":"busy"}}`},
		httpAnswer{status: 200, body: `{"ok":true}`},
	)
	client, base, rec := httpClient(t, srv, retry3())

	// The body can be read once; GetBody rewinds it. (net/http itself
	// replays a strings.Reader, which would hide a retry that does not
	// rewind.)
	const payload = `{"prompt":"hi"}`
	req, err := http.NewRequest(http.MethodPost, chatURL(srv), &onceBody{r: strings.NewReader(payload)})
	require.NoError(t, err)
	req.ContentLength = int64(len(payload))
	var rewinds atomic.Int32
	req.GetBody = func() (io.ReadCloser, error) {
		rewinds.Add(1)
		return &onceBody{r: strings.NewReader(payload)}, nil
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	assert.Equal(t, int32(1), rewinds.Load(), "the body is rewound once, for the retry")
	assert.Equal(t, 200, resp.StatusCode, "the final answer")
	assert.Equal(t, []bool{true, false}, base.closed(), "the 503's body is closed; the answer's is the caller's to close")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, `{"ok":true}`, string(body))

	assert.Equal(t, []string{payload, payload}, srv.requests(), "two requests, the body rewound for the second")
	assertRequestSpans(t, rec, srv, http.MethodPost, 503, 200)
}

// onceBody is a request body that can be read only once.
type onceBody struct{ r io.Reader }

func (b *onceBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *onceBody) Close() error               { return nil }

// A request whose body cannot be rewound is sent once: a retry would send
// an empty or partial body. The layer refuses the retry before it starts,
// so no span stands for a request never sent, and the caller gets the
// answer it gave up on.
func TestTransportDoesNotResendABodyItCannotRewind(t *testing.T) {
	srv := newHTTPServer(t,
		httpAnswer{status: 503, body: `{"error":{"type":"overloaded_error","message":"busy"}}`},
		httpAnswer{status: 200, body: `{"ok":true}`},
	)
	client, base, rec := httpClient(t, srv, retry3())

	req, err := http.NewRequest(http.MethodPost, chatURL(srv), &onceBody{r: strings.NewReader(`{"prompt":"hi"}`)})
	require.NoError(t, err)
	require.Nil(t, req.GetBody, "http.NewRequest cannot rewind a body of an unknown type")
	resp, err := client.Do(req)
	require.NoError(t, err)
	assert.Equal(t, 503, resp.StatusCode, "the answer the layer gave up on")
	require.NoError(t, resp.Body.Close())

	assert.Equal(t, []string{`{"prompt":"hi"}`}, srv.requests(), "one request")
	assert.Equal(t, []bool{true}, base.closed())
	assertRequestSpans(t, rec, srv, http.MethodPost, 503)
	root := rootSpan(t, rec)
	outcome, _ := spanAttr(root, "retrace.outcome")
	assert.Equal(t, "rejected", outcome.AsString(), "the retry was refused")
	diag, _ := spanAttr(root, "retrace.diagnosis")
	assert.Contains(t, diag.AsString(), "cannot be rewound")
	calls, _ := spanAttr(root, "retrace.calls")
	assert.Equal(t, int64(1), calls.AsInt64(), "one request, one leaf call")
}

// When the layer gives up on an error answer, the caller gets that answer
// as the response, body intact, and every earlier answer is closed.
func TestTransportReturnsTheAnswerItGaveUpOn(t *testing.T) {
	long := `{"error":{"type":"invalid_request_error","message":"` + strings.Repeat("x", 100<<10) + `"}}`
	cases := []struct {
		name     string
		answer   httpAnswer
		requests int
	}{
		{"400 is not retried", httpAnswer{status: 400, body: `{"error":{"type":"invalid_request_error","message":"bad field"}}`}, 1},
		{"400 with a body over 64 KiB", httpAnswer{status: 400, body: long}, 1},
		{"404 without a body", httpAnswer{status: 404}, 1},
		{"429 until the retries run out", httpAnswer{status: 429, body: `{"error":{"code":"rate_limit_exceeded","message":"slow down"}}`}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := newHTTPServer(t, c.answer)
			client, base, rec := httpClient(t, srv, retry3())

			resp, err := client.Get(chatURL(srv))
			require.NoError(t, err, "an error answer is a response, not an error")
			assert.Equal(t, c.answer.status, resp.StatusCode)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, c.answer.body, string(body), "the body, in full")
			require.NoError(t, resp.Body.Close())

			assert.Len(t, srv.requests(), c.requests)
			closed := base.closed()
			require.Len(t, closed, c.requests)
			for i, ok := range closed {
				assert.True(t, ok, "response %d is closed", i+1)
			}
			statuses := make([]int, c.requests)
			for i := range statuses {
				statuses[i] = c.answer.status
			}
			assertRequestSpans(t, rec, srv, http.MethodGet, statuses...)
		})
	}
}

// Before the caller closes the answer it got, that body stays open while the
// ones the layer discarded are closed.
func TestTransportClosesOnlyTheDiscardedAnswers(t *testing.T) {
	srv := newHTTPServer(t, httpAnswer{status: 503}, httpAnswer{status: 502}, httpAnswer{status: 500, body: "down"})
	client, base, _ := httpClient(t, srv, retry3())
	resp, err := client.Get(chatURL(srv))
	require.NoError(t, err)
	assert.Equal(t, 500, resp.StatusCode)
	assert.Equal(t, []bool{true, true, false}, base.closed())
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "down", string(body))
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, []bool{true, true, true}, base.closed())
}

// Without a retry, the one request is the call's span itself: a client span
// with the HTTP attributes.
func TestTransportSpanWithoutRetry(t *testing.T) {
	srv := newHTTPServer(t, httpAnswer{status: 201, body: "made"})
	client, _, rec := httpClient(t, srv)
	resp, err := client.Post(chatURL(srv), "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assertRequestSpans(t, rec, srv, http.MethodPost, 201)
	assert.Equal(t, trace.SpanKindClient, requestSpans(rec)[0].SpanKind())
}

// httpResponse is an answer with status, headers and body, as a
// transport returns it.
func httpResponse(status int, header http.Header, body string) *http.Response {
	if header == nil {
		header = http.Header{}
	}
	return &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(strings.NewReader(body))}
}

func TestErrorFrom(t *testing.T) {
	cases := []struct {
		name   string
		status int
		header http.Header
		body   string
		want   policies.Error
	}{
		{
			name: "OpenAI: the code wins over the type", status: 401,
			body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			want: policies.Error{StatusCode: 401, Code: "invalid_api_key", Message: "Incorrect API key provided"},
		},
		{
			name: "OpenAI without a code: the type", status: 400,
			body: `{"error":{"message":"Unrecognized request argument","type":"invalid_request_error","code":null}}`,
			want: policies.Error{StatusCode: 400, Code: "invalid_request_error", Message: "Unrecognized request argument"},
		},
		{
			name: "Anthropic", status: 529,
			body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			want: policies.Error{StatusCode: 529, Code: "overloaded_error", Message: "Overloaded"},
		},
		{
			name: "error as text", status: 500,
			body: `{"error":"upstream connect error"}`,
			want: policies.Error{StatusCode: 500, Message: "upstream connect error"},
		},
		{
			name: "numeric code: the type", status: 429,
			body: `{"error":{"code":429,"type":"rate_limit_error","message":"slow down"}}`,
			want: policies.Error{StatusCode: 429, Code: "rate_limit_error", Message: "slow down"},
		},
		{
			name: "numeric code and no type", status: 429,
			body: `{"error":{"code":429,"message":"slow down"}}`,
			want: policies.Error{StatusCode: 429, Message: "slow down"},
		},
		{
			name: "invalid JSON", status: 502,
			body: `<html><body>Bad Gateway</body></html>`,
			want: policies.Error{StatusCode: 502},
		},
		{
			name: "JSON without an error", status: 503,
			body: `{"message":"maintenance"}`,
			want: policies.Error{StatusCode: 503},
		},
		{
			name: "empty body", status: 503,
			want: policies.Error{StatusCode: 503},
		},
		{
			name: "Retry-After in seconds", status: 429,
			header: http.Header{"Retry-After": {"7"}},
			body:   `{"error":{"type":"rate_limit_error","message":"slow down"}}`,
			want:   policies.Error{StatusCode: 429, Code: "rate_limit_error", Message: "slow down", RetryAfter: 7 * time.Second},
		},
		{
			name: "retry-after-ms", status: 429,
			header: http.Header{"Retry-After-Ms": {"1500"}},
			want:   policies.Error{StatusCode: 429, RetryAfter: 1500 * time.Millisecond},
		},
		{
			name: "retry-after-ms is preferred to Retry-After", status: 429,
			header: http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"7"}},
			want:   policies.Error{StatusCode: 429, RetryAfter: 250 * time.Millisecond},
		},
		{
			name: "an invalid Retry-After is no hint", status: 429,
			header: http.Header{"Retry-After": {"soon"}},
			want:   policies.Error{StatusCode: 429},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := httpResponse(c.status, c.header, c.body)
			got := policies.ErrorFrom(resp)
			require.NotNil(t, got)
			assert.Equal(t, c.want, *got)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, c.body, string(body), "the body can still be read in full")
		})
	}

	t.Run("no body", func(t *testing.T) {
		got := policies.ErrorFrom(&http.Response{StatusCode: 503, Header: http.Header{}})
		assert.Equal(t, policies.Error{StatusCode: 503}, *got)
	})
}

// ErrorFrom reads at most 1 MiB of the body and puts what it read back:
// the caller reads the whole body, whatever its size, and closing it closes
// the original.
func TestErrorFromLeavesTheBodyWhole(t *testing.T) {
	errorJSON := `{"error":{"type":"overloaded_error","message":"Overloaded"}}`
	cases := []struct {
		name string
		body string
		want policies.Error
	}{
		{"64 KiB - 1", errorJSON + strings.Repeat(" ", 64<<10-1-len(errorJSON)), policies.Error{StatusCode: 529, Code: "overloaded_error", Message: "Overloaded"}},
		{"64 KiB", errorJSON + strings.Repeat(" ", 64<<10-len(errorJSON)), policies.Error{StatusCode: 529, Code: "overloaded_error", Message: "Overloaded"}},
		// The error object is in the first 64 KiB: it is read.
		{"error object, then 200 KiB of padding", errorJSON + strings.Repeat(" ", 200<<10), policies.Error{StatusCode: 529, Code: "overloaded_error", Message: "Overloaded"}},
		// A message of any length: the code is read wherever it is, before
		// the message (Anthropic's order) or after it (OpenAI's), and the
		// message is kept cut to 1 KiB.
		{"a message over 64 KiB", `{"error":{"type":"overloaded_error","message":"` + strings.Repeat("y", 100<<10) + `"}}`,
			policies.Error{StatusCode: 529, Code: "overloaded_error", Message: strings.Repeat("y", 1021) + "…"}},
		{"the code after a 100 KiB message", `{"error":{"message":"` + strings.Repeat("y", 100<<10) + `","type":"billing_error","code":null}}`,
			policies.Error{StatusCode: 529, Code: "billing_error", Message: strings.Repeat("y", 1021) + "…"}},
		// Past the 1 MiB read nothing more is looked for: a string cut by the
		// limit is not kept.
		{"the code after 2 MiB", `{"error":{"message":"` + strings.Repeat("y", 2<<20) + `","code":"billing_error"}}`,
			policies.Error{StatusCode: 529}},
		{"1 MiB of binary", string(bytes.Repeat([]byte{0, 1, 2, 0xff}, 256<<10)), policies.Error{StatusCode: 529}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			orig := &trackedBody{ReadCloser: io.NopCloser(strings.NewReader(c.body))}
			resp := &http.Response{StatusCode: 529, Header: http.Header{}, Body: orig}
			got := policies.ErrorFrom(resp)
			assert.Equal(t, c.want, *got)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, len(c.body), len(body))
			assert.True(t, c.body == string(body), "the body is the original, byte for byte")
			require.NoError(t, resp.Body.Close())
			assert.True(t, orig.closed.Load(), "closing the body closes the original")
		})
	}
}

// A body that fails while ErrorFrom reads it gives an error with the
// status only; what was read, and the failure, still reach the caller.
func TestErrorFromBodyReadFails(t *testing.T) {
	broken := errors.New("connection reset")
	resp := &http.Response{StatusCode: 503, Header: http.Header{}, Body: io.NopCloser(io.MultiReader(
		strings.NewReader(`{"error":`), errReader{broken}))}
	got := policies.ErrorFrom(resp)
	assert.Equal(t, policies.Error{StatusCode: 503}, *got)
	body, err := io.ReadAll(resp.Body)
	assert.Equal(t, `{"error":`, string(body))
	assert.ErrorIs(t, err, broken)
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// A per-request timeout bounds the request, its body included: the
// attempt's context lives until the body is read or closed, so a body
// longer than the first read is never cut when the headers arrive.
func TestTransportTimeoutKeepsTheBody(t *testing.T) {
	const size = 256 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		chunk := strings.Repeat("x", 1024)
		for written := 0; written < size; written += len(chunk) + 7 {
			_, _ = io.WriteString(w, "data: "+chunk+"\n")
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "\n")
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	for _, ps := range [][]failsafe.Policy[*http.Response]{
		{policies.NewTimeout[*http.Response](time.Minute, nil)},
		{policies.NewRetry[*http.Response](policies.RetryConfig{MaxAttempts: 2}), policies.NewTimeout[*http.Response](time.Minute, nil)},
	} {
		client := &http.Client{Transport: middleware.Transport(base, "http", middleware.WithHTTPPolicies(ps...))}
		resp, err := client.Get(srv.URL)
		require.NoError(t, err)
		n, err := io.Copy(io.Discard, resp.Body)
		require.NoError(t, err, "the body is read whole")
		assert.Greater(t, n, int64(size))
		require.NoError(t, resp.Body.Close())
	}
}

// A failsafe-go retry policy under Transport runs through failsafe-go's
// executor, and its attempts are the physical requests too: a request span
// each, numbered among the resends, beneath the layer's span.
func TestTransportFailsafeRetryAttemptsAreRequests(t *testing.T) {
	srv := newHTTPServer(t,
		httpAnswer{status: 503, body: `{"error":{"type":"overloaded_error","message":"busy"}}`},
		httpAnswer{status: 200, body: `{"ok":true}`},
	)
	client, _, rec := httpClient(t, srv, retrypolicy.NewBuilder[*http.Response]().WithMaxAttempts(3).Build())
	resp, err := client.Get(chatURL(srv))
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Len(t, srv.requests(), 2)
	assertRequestSpans(t, rec, srv, http.MethodGet, 503, 200)
}
