package session_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	rt "github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
)

// bounded is a session against a fault server whose answers the client
// counts as it reads them from the network.
type bounded struct {
	srv  *retracetest.Server
	read *atomic.Int64 // body bytes the client read
	clk  *clock.Fake
	s    *session.Session
}

// startBounded starts a fault server with script and a session against it
// through the real openai-go client with the given limits, on a virtual
// clock. A zero retry is the session's default.
func startBounded(t *testing.T, script retracetest.Script, limits session.Limits, retry policies.RetryConfig) *bounded {
	t.Helper()
	srv := retracetest.New(script)
	require.NoError(t, srv.Start())
	t.Cleanup(srv.Close)
	ct := &countingTransport{base: &http.Transport{}}
	t.Cleanup(ct.base.CloseIdleConnections)
	clk := clock.NewVirtual(epoch)
	s, err := session.New(session.Config{
		Provider: session.NewOpenAI(session.OpenAIConfig{
			BaseURL: srv.URL(), APIKey: "sk-test-0123456789abcdefghij",
			HTTPClient: &http.Client{Transport: ct}, Limits: limits,
		}),
		Model:   "gpt-test",
		Retry:   retry,
		Options: []middleware.Option{middleware.WithClock(clk)},
	})
	require.NoError(t, err)
	return &bounded{srv: srv, read: &ct.read, clk: clk, s: s}
}

// countingTransport counts the bytes of the answer bodies read through it.
type countingTransport struct {
	base *http.Transport
	read atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// allocated runs f and returns the bytes it allocated on the heap: with
// nothing else running, an upper bound of how far it raised the heap,
// counted exactly, whenever the collector ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// One event of 64 MiB that never ends, as one line or as lines of 1 KiB,
// is cut at Limits.MaxEventBytes: a permanent error naming the limit, after
// one request that read one byte past the limit, in memory bounded by a
// small multiple of the limit.
func TestEventOverTheLimit(t *testing.T) {
	const size = 64 << 20
	for _, tc := range []struct {
		name      string
		lineBytes int
	}{{"one line", 0}, {"lines of 1 KiB", 1 << 10}} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBounded(t, retracetest.Always(retracetest.HugeEvent(size, tc.lineBytes)), session.Limits{}, policies.RetryConfig{})
			var err error
			alloc := allocated(func() { _, err = b.s.Run(context.Background(), "hi") })
			require.Error(t, err)
			c := policies.Classify(err)
			assert.Equal(t, policies.Permanent, c.Class)
			assert.Equal(t, "event_too_large", c.Type)
			le := requireLimit(t, err)
			assert.Equal(t, "limit MaxEventBytes", le.Reason)
			assert.Contains(t, err.Error(), "Limits.MaxEventBytes (1048576 bytes)")
			assert.Equal(t, 1, b.srv.Requests(), "a permanent error is not retried")
			assert.LessOrEqual(t, b.read.Load(), int64(session.DefaultMaxEventBytes+1), "the client reads one byte past the limit")
			b.srv.Close() // waits for the handler, which stops when its writes fail
			assert.Less(t, b.srv.Written(), int64(size/2), "the server stopped writing when the client hung up")
			assert.Less(t, alloc, uint64(16*session.DefaultMaxEventBytes+16<<20))
			t.Logf("client read %d bytes, server wrote %d, heap allocated %.1f MiB", b.read.Load(), b.srv.Written(), float64(alloc)/(1<<20))
		})
	}
}

// A limit above the SDK's own line limit meets the SDK's: a line over 32 MiB
// is the same permanent error, naming the SDK's limit, never unknown.
func TestLineOverTheSDKLimit(t *testing.T) {
	b := startBounded(t, retracetest.Always(retracetest.HugeEvent(40<<20, 0)), session.Limits{MaxEventBytes: 64 << 20}, policies.RetryConfig{})
	_, err := b.s.Run(context.Background(), "hi")
	require.Error(t, err)
	c := policies.Classify(err)
	assert.Equal(t, policies.Permanent, c.Class)
	assert.Equal(t, "event_too_large", c.Type)
	le := requireLimit(t, err)
	assert.Equal(t, "limit SDKLine", le.Reason)
	assert.Equal(t, 1, b.srv.Requests())
}

// sseBody is an answer streamed as OpenAI streams it, with lines ended by
// eol: two content chunks, the finish chunk and [DONE].
func sseBody(eol string) string {
	events := []string{
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]}`,
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{"content":" there, a longer piece of the answer"},"finish_reason":null}]}`,
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`[DONE]`,
	}
	var sb strings.Builder
	for _, e := range events {
		sb.WriteString("data: " + e + eol + eol)
	}
	return sb.String()
}

// largestEvent is the size of the largest event of an SSE body whose lines
// end with eol, as Limits.MaxEventBytes counts it: its lines, the newline of
// the last one included, the blank line after it not.
func largestEvent(body, eol string) int64 {
	var n int64
	for _, e := range strings.Split(body, eol+eol) {
		n = max(n, int64(len(e)+len(eol)))
	}
	return n
}

// The limits are exact: an event of MaxEventBytes, and an answer of
// MaxResponseBytes, pass; one byte less fails. A lone "\r" at the start of
// the blank line that ends an event is not counted in it.
func TestLimitsAreExact(t *testing.T) {
	for _, eol := range []string{"\n", "\r\n"} {
		body := sseBody(eol)
		event, total := largestEvent(body, eol), int64(len(body))
		for _, tc := range []struct {
			name   string
			limits session.Limits
			fails  string // the error.type, empty for a success
		}{
			{"event at the limit", session.Limits{MaxEventBytes: event}, ""},
			{"event over the limit", session.Limits{MaxEventBytes: event - 1}, "event_too_large"},
			{"answer at the limit", session.Limits{MaxResponseBytes: total}, ""},
			{"answer over the limit", session.Limits{MaxResponseBytes: total - 1}, "response_too_large"},
		} {
			t.Run(strings.ReplaceAll(eol, "\r", `\r`)+" "+tc.name, func(t *testing.T) {
				p := session.NewOpenAI(session.OpenAIConfig{BaseURL: serveSSE(t, func() []byte { return []byte(body) }), Limits: tc.limits})
				msg, err := p.Stream(context.Background(), session.Request{Model: "gpt-test"}, nil)
				if tc.fails == "" {
					require.NoError(t, err)
					assert.Equal(t, "Hello there, a longer piece of the answer", msg.Content)
					return
				}
				require.Error(t, err)
				c := policies.Classify(err)
				assert.Equal(t, policies.Permanent, c.Class)
				assert.Equal(t, tc.fails, c.Type)
			})
		}
	}
}

// serveSSE serves the bytes body returns, at each request, as an event
// stream on 127.0.0.1, and returns the server's URL.
func serveSSE(tb testing.TB, body func() []byte) string {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(body())
	}))
	tb.Cleanup(srv.Close)
	return srv.URL
}

// A 100 MiB error body is read only up to Limits.MaxErrorBodyBytes; the
// error is still the one its status says: transient for a 500, permanent
// (one request) for a 401.
func TestErrorBodyOverTheLimit(t *testing.T) {
	const size = 100 << 20
	for _, tc := range []struct {
		status   int
		class    policies.Class
		requests int
	}{{500, policies.Transient, 4}, {401, policies.Permanent, 1}} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			b := startBounded(t, retracetest.Always(retracetest.HugeError(tc.status, size)), session.Limits{}, policies.RetryConfig{})
			var (
				msg session.Message
				err error
			)
			alloc := allocated(func() { msg, err = b.s.Run(context.Background(), "hi") })
			require.Error(t, err)
			assert.Equal(t, tc.class, policies.Classify(err).Class)
			var api *policies.Error
			require.ErrorAs(t, err, &api)
			assert.Equal(t, tc.status, api.StatusCode)
			assert.Empty(t, api.Message, "what was read is not a whole JSON object")
			assert.Equal(t, tc.requests, b.srv.Requests())
			assert.LessOrEqual(t, b.read.Load(), int64(tc.requests*session.DefaultMaxErrorBodyBytes), "each answer is read up to the limit")
			assert.LessOrEqual(t, len(msg.ErrorMessage), session.MaxErrorText)
			assert.Less(t, alloc, uint64(16*session.DefaultMaxErrorBodyBytes*tc.requests+16<<20))
			b.srv.Close()
			t.Logf("client read %d bytes in %d requests, server wrote %d, heap allocated %.1f MiB",
				b.read.Load(), tc.requests, b.srv.Written(), float64(alloc)/(1<<20))
		})
	}
}

// MaxErrorBodyBytes can be lowered: an error object past it is not decoded,
// and the answer is classified by its status alone.
func TestErrorBodyLimitCanBeChanged(t *testing.T) {
	quota := retracetest.InsufficientQuota()
	for _, tc := range []struct {
		limit int64
		class policies.Class
		code  string
	}{{1 << 10, policies.Fatal, "insufficient_quota"}, {40, policies.Transient, ""}} {
		b := startBounded(t, retracetest.Always(quota), session.Limits{MaxErrorBodyBytes: tc.limit}, policies.RetryConfig{MaxAttempts: 1})
		_, err := b.s.Run(context.Background(), "hi")
		var api *policies.Error
		require.ErrorAs(t, err, &api)
		assert.Equal(t, 429, api.StatusCode)
		assert.Equal(t, tc.code, api.Code)
		assert.Equal(t, tc.class, policies.Classify(err).Class)
		assert.LessOrEqual(t, b.read.Load(), tc.limit)
	}
}

// A provider's message over 1 KiB is cut to 1 KiB, at a character boundary,
// marked with "…".
func TestErrorMessageIsCut(t *testing.T) {
	long := strings.Repeat("é", 25<<10) // 50 KiB of two-byte characters
	b := startBounded(t, retracetest.Always(retracetest.Status(500, "server_error", "server_error", long)), session.Limits{}, policies.RetryConfig{MaxAttempts: 1})
	msg, err := b.s.Run(context.Background(), "hi")
	var api *policies.Error
	require.ErrorAs(t, err, &api)
	assert.LessOrEqual(t, len(api.Message), 1<<10)
	assert.Greater(t, len(api.Message), 1<<10-8)
	assert.True(t, strings.HasSuffix(api.Message, "é…"), "%q", api.Message[len(api.Message)-8:])
	assert.True(t, utf8.ValidString(api.Message))
	assert.LessOrEqual(t, len(msg.ErrorMessage), session.MaxErrorText)
	assert.LessOrEqual(t, len(err.Error()), session.MaxErrorText)
}

// ErrorText, the text of a failed turn in the history, is cut to
// MaxErrorText bytes, whatever error it is given.
func TestErrorTextIsCut(t *testing.T) {
	long := errors.New(strings.Repeat("ü", 10<<10))
	for _, err := range []error{
		long,
		policies.StreamDropped(long.Error(), nil),
		&policies.Error{StatusCode: 500, Message: long.Error()},
	} {
		text := session.ErrorText(err)
		assert.LessOrEqual(t, len(text), session.MaxErrorText)
		assert.Greater(t, len(text), session.MaxErrorText-8)
		assert.True(t, strings.HasSuffix(text, "ü…"))
		assert.True(t, utf8.ValidString(text))
	}
	assert.Equal(t, "Error: short", session.ErrorText(errors.New("short")), "a short text is kept whole")
}

// An error whose "error" is a string is classified by its status: a 401 is
// permanent, one request, through the session and through a runtime above
// it; a 503 is transient.
func TestStringErrorClassifiedByStatus(t *testing.T) {
	for _, tc := range []struct {
		fault    retracetest.Fault
		class    policies.Class
		requests int
	}{
		{retracetest.StringError(401, "Invalid API key"), policies.Permanent, 1},
		{retracetest.StringError(403, "Forbidden"), policies.Permanent, 1},
		{retracetest.StringError(503, "upstream connect error"), policies.Transient, 4},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			b := startBounded(t, retracetest.Always(tc.fault), session.Limits{}, policies.RetryConfig{})
			_, err := b.s.Run(context.Background(), "hi")
			require.Error(t, err)
			assert.Equal(t, tc.class, policies.Classify(err).Class)
			var api *policies.Error
			require.ErrorAs(t, err, &api)
			assert.Equal(t, tc.fault.Status, api.StatusCode)
			assert.NotEmpty(t, api.Message)
			assert.Equal(t, tc.requests, b.srv.Requests())
		})
	}
	t.Run("through a runtime", func(t *testing.T) {
		b := startBounded(t, retracetest.Always(retracetest.StringError(401, "Invalid API key")), session.Limits{}, policies.RetryConfig{})
		r := rt.New(b.s, rt.Config{Options: []middleware.Option{middleware.WithClock(b.clk)}})
		_, err := r.Exec(context.Background(), "hi")
		require.Error(t, err)
		assert.Equal(t, policies.Permanent, policies.Classify(err).Class)
		assert.Equal(t, 1, b.srv.Requests(), "neither the session nor the runtime retries it")
	})
}

// An error event in the middle of a stream is classified by its code and
// type, as its HTTP twin is: whether it comes as data with an "error" member
// or as an event named "error", in OpenAI's or Anthropic's shape.
func TestErrorEventClassifiedAsItsHTTPTwin(t *testing.T) {
	named := func(data string) retracetest.Fault {
		return retracetest.ErrorEvent(2, "", "", "").WithEvent("error").WithBody(data)
	}
	for _, tc := range []struct {
		name  string
		fault retracetest.Fault
		class policies.Class
		code  string // the APIError's code; empty when the error is not an APIError
	}{
		{"insufficient_quota", retracetest.ErrorEvent(2, "insufficient_quota", "insufficient_quota", "You exceeded your current quota."), policies.Fatal, "insufficient_quota"},
		{"server_error without a transient word", retracetest.ErrorEvent(2, "", "server_error", "The server had an error while processing your request."), policies.Transient, "server_error"},
		{"overloaded", retracetest.ErrorEvent(1, "overloaded", "overloaded", "Please try again later."), policies.Transient, "overloaded"},
		{"overloaded_error", retracetest.ErrorEvent(1, "", "overloaded_error", "Please try again later."), policies.Transient, "overloaded_error"},
		{"rate_limit_exceeded", retracetest.ErrorEvent(2, "rate_limit_exceeded", "requests", "Please try again later."), policies.Transient, "rate_limit_exceeded"},
		{"context_length_exceeded", retracetest.ErrorEvent(0, "context_length_exceeded", "invalid_request_error", "Too many tokens."), policies.ContextOverflow, "context_length_exceeded"},
		{"invalid_request_error", retracetest.ErrorEvent(0, "", "invalid_request_error", "Bad argument."), policies.Permanent, "invalid_request_error"},
		{"named, Anthropic's shape", named(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), policies.Transient, "overloaded_error"},
		{"named, its own code", named(`{"type":"error","code":"insufficient_quota","message":"Quota exceeded."}`), policies.Fatal, "insufficient_quota"},
		{"named, its own type", named(`{"type":"server_error","message":"Try later."}`), policies.Transient, "server_error"},
		{"named, not JSON", named(`upstream went away`), policies.Transient, ""},
		{"error as text", retracetest.ErrorEvent(2, "", "", "").WithBody(`{"error":"Internal error"}`), policies.Transient, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBounded(t, retracetest.Always(tc.fault), session.Limits{}, policies.RetryConfig{})
			_, err := b.s.Run(context.Background(), "hi")
			require.Error(t, err)
			c := policies.Classify(err)
			assert.Equal(t, tc.class, c.Class, c.Reason)
			want := 1
			if tc.class == policies.Transient {
				want = 4 // the session's attempts
			}
			assert.Equal(t, want, b.srv.Requests())
			if tc.code == "" {
				assert.Equal(t, "stream_error", c.Type, "an error event no rule knows")
				return
			}
			var api *policies.Error
			require.ErrorAs(t, err, &api)
			assert.Equal(t, tc.code, api.Code)
			assert.Zero(t, api.StatusCode, "no status: it came in a 200")
			assert.NotEmpty(t, api.Message)
		})
	}
}

// A cancellation while the body of an error answer is read is the caller's
// cancellation, not the error answer's class.
func TestCancelWhileReadingAnErrorBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(500)
		_, _ = w.Write([]byte(`{"error":`))
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	headers := &notifyTransport{base: &http.Transport{}, got: make(chan struct{}, 1)}
	t.Cleanup(headers.base.CloseIdleConnections)
	p := session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL, HTTPClient: &http.Client{Transport: headers}})
	done := make(chan error, 1)
	go func() {
		_, err := p.Stream(ctx, session.Request{Model: "gpt-test"}, nil)
		done <- err
	}()
	<-headers.got // the SDK is reading the body, or about to
	cancel()
	err := <-done
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, policies.Canceled, policies.Classify(err).Class)
}

// notifyTransport tells when an answer's headers arrived.
type notifyTransport struct {
	base *http.Transport
	got  chan struct{}
}

func (n *notifyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := n.base.RoundTrip(req)
	n.got <- struct{}{}
	return resp, err
}

// An error object's code is read whatever its message's length: a
// billing_error with a 100 KiB message is fatal (one request), a 900 KiB
// overloaded_error event is transient, each with its code as error.type.
func TestLongErrorMessagesKeepTheirCode(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	for _, tc := range []struct {
		name     string
		fault    retracetest.Fault
		class    policies.Class
		typ      string
		requests int
	}{
		{"billing, 100 KiB", retracetest.Status(402, "billing_error", "billing_error", long), policies.Fatal, "billing_error", 1},
		{"overloaded event, 900 KiB", retracetest.ErrorEvent(1, "overloaded_error", "overloaded_error", strings.Repeat("y", 900<<10)), policies.Transient, "overloaded_error", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBounded(t, retracetest.Always(tc.fault), session.Limits{}, policies.RetryConfig{})
			_, err := b.s.Run(context.Background(), "hi")
			require.Error(t, err)
			c := policies.Classify(err)
			assert.Equal(t, tc.class, c.Class, c.Reason)
			assert.Equal(t, tc.typ, c.Type)
			assert.Equal(t, tc.requests, b.srv.Requests())
		})
	}
}

// MaxErrorText is the turn's cap in retrace's one table of text caps.
func TestMaxErrorTextIsTheTablesCap(t *testing.T) {
	assert.Equal(t, engine.CapTurnError, session.MaxErrorText)
}

// requireLimit is err's answer past a limit: a Permanent *policies.Error
// whose Reason names the limit.
func requireLimit(t *testing.T, err error) *policies.Error {
	t.Helper()
	le, ok := errors.AsType[*policies.Error](err)
	require.True(t, ok, "%v", err)
	require.True(t, strings.HasPrefix(le.Reason, "limit "), "%v: %s", err, le.Reason)
	assert.Equal(t, policies.Permanent, le.Class)
	return le
}
