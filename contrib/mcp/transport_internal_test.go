package retracemcp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The request's id is read however large its params are, and wherever the
// id stands among the members.
func TestJSONID(t *testing.T) {
	big := strings.Repeat("x", 70<<10)
	for _, tt := range []struct{ body, want string }{
		{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"arguments":{"text":"` + big + `"}}}`, "3"},
		{`{"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"text":"` + big + `"}},"id":"req-7"}`, "req-7"},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, ""},
		{`{"jsonrpc":"2.0","id":12345678901234,"method":"ping"}`, "12345678901234"},
		{`[{"id":1}]`, ""},
		{`{"params":{"id":9},"id":2}`, "2"},
		{`not json`, ""},
		{`{"id":`, ""},
	} {
		assert.Equal(t, tt.want, jsonID(strings.NewReader(tt.body)), tt.body[:min(len(tt.body), 60)])
	}
}

// scripted answers the GETs of a session's standalone stream in turn.
type scripted []func() (*http.Response, error)

func (s *scripted) RoundTrip(*http.Request) (*http.Response, error) {
	next := (*s)[0]
	*s = (*s)[1:]
	return next()
}

func stream() (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(""))}, nil
}

func status(code int) func() (*http.Response, error) {
	return func() (*http.Response, error) {
		return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, nil
	}
}

func dialRefused() (*http.Response, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
}

// A session's standalone stream that was open and cannot be opened again
// ends the session for every request of it in flight; a server that never
// offered one (405, or a 4xx at the first GET) ends nothing.
func TestStandaloneStreamEndsTheSession(t *testing.T) {
	get := func(rt *roundTripper, session string) {
		req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/mcp", nil)
		require.NoError(t, err)
		req.Header.Set(sessionIDHeader, session)
		if resp, err := rt.RoundTrip(req); err == nil {
			_ = resp.Body.Close()
		}
	}
	inFlight := func(rt *roundTripper, session string) *note { return &note{rt: rt, session: session} }

	for _, tt := range []struct {
		name   string
		script scripted
		ended  bool
	}{
		{"open, then refused", scripted{stream, dialRefused}, true},
		{"open, then a gateway's 502", scripted{stream, status(502)}, true},
		{"open, then open again", scripted{stream, stream}, false},
		{"never offered: 405", scripted{status(405), status(405)}, false},
		{"never offered: 404 at the first GET", scripted{status(404), dialRefused}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			script := tt.script
			rt := &roundTripper{base: &script}
			for range len(tt.script) {
				get(rt, "s-1")
			}
			err := inFlight(rt, "s-1").sessionEnded()
			assert.Equal(t, tt.ended, err != nil, "%v", err)
			assert.NoError(t, inFlight(rt, "s-2").sessionEnded(), "another session of the transport")
		})
	}
}

// wroteThenCanceled stands for net/http's transport when the request's wait
// is canceled after its bytes went out: the write's end is traced, the
// round trip returns the context's error.
type wroteThenCanceled struct{ cancel func() }

func (w wroteThenCanceled) RoundTrip(req *http.Request) (*http.Response, error) {
	if tr := httptrace.ContextClientTrace(req.Context()); tr != nil && tr.WroteRequest != nil {
		tr.WroteRequest(httptrace.WroteRequestInfo{})
	}
	w.cancel()
	return nil, req.Context().Err()
}

// A request whose bytes went out is delivered even when its wait ends by
// the context (the session ended beneath it): the server may have it, so it
// is counted, not unsent. One refused at the dial is not.
func TestWrittenRequestIsDelivered(t *testing.T) {
	post := func(base http.RoundTripper, ctx context.Context) *note {
		n := &note{}
		req, err := http.NewRequestWithContext(context.WithValue(ctx, noteKey{}, n), http.MethodPost, "http://127.0.0.1:1/mcp",
			strings.NewReader(`{"jsonrpc":"2.0","id":4,"method":"tools/call"}`))
		require.NoError(t, err)
		if resp, err := (&roundTripper{base: base}).RoundTrip(req); err == nil {
			_ = resp.Body.Close()
		}
		return n
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	assert.True(t, post(wroteThenCanceled{cancel}, ctx).delivered(), "written, then its wait canceled")
	refused := scripted{dialRefused}
	n := post(&refused, context.Background())
	assert.False(t, n.delivered(), "refused at the dial")
	assert.Error(t, n.undelivered())
}

// The SDK sends notifications/cancelled under the request's context when
// the request's wait ends; to a server that is gone it is refused. That
// refusal is not the request's: a request that went out stays delivered,
// over HTTP and over a pipe.
func TestCancellationAfterTheRequestIsNotTheRequest(t *testing.T) {
	t.Run("http", func(t *testing.T) {
		n := &note{}
		ctx := context.WithValue(context.Background(), noteKey{}, n)
		script := scripted{stream, dialRefused}
		rt := &roundTripper{base: &script}
		for _, body := range []string{
			`{"jsonrpc":"2.0","id":4,"method":"tools/call"}`,
			`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}`,
		} {
			req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, "http://127.0.0.1:1/mcp", strings.NewReader(body))
			require.NoError(t, err)
			if resp, err := rt.RoundTrip(req); err == nil {
				_ = resp.Body.Close()
			}
		}
		assert.Empty(t, script, "both POSTs went to the transport")
		assert.True(t, n.delivered())
		assert.NoError(t, n.undelivered())
	})
	t.Run("pipe", func(t *testing.T) {
		n := &note{}
		ctx := context.WithValue(context.Background(), noteKey{}, n)
		conn := &pipeConn{Connection: &failingConn{after: 1}}
		call, err := jsonrpc.MakeID(float64(4))
		require.NoError(t, err)
		require.NoError(t, conn.Write(ctx, &jsonrpc.Request{ID: call, Method: "tools/call"}))
		require.Error(t, conn.Write(context.WithoutCancel(ctx), &jsonrpc.Request{Method: "notifications/cancelled"}))
		assert.True(t, n.delivered())
		assert.NoError(t, n.undelivered())
	})
}

// failingConn takes after messages, then refuses every write, as the pipe
// of a process that exited.
type failingConn struct {
	mcp.Connection
	after int
}

func (c *failingConn) Write(context.Context, jsonrpc.Message) error {
	if c.after == 0 {
		return io.ErrClosedPipe
	}
	c.after--
	return nil
}
