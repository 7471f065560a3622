package retracemcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/policies"
)

// Transport returns t with what only the transport sees written on each
// request's span and read into its classification: the JSON-RPC request's
// id (jsonrpc.request.id), the network (network.transport; over Streamable
// HTTP also network.protocol.name and .version, server.address and
// server.port, and an HTTP error status, with its Retry-After), whether the
// request went out at all (a refused connection, a write to a server that
// exited: the call reached nothing and is not counted in retrace.calls),
// and whether the session ended beneath it (over Streamable HTTP: the
// answer's stream cut, its resumption or the session's standalone stream
// refused). It changes nothing of what is sent:
//
//	cs, err := client.Connect(ctx, rc.Transport(&mcp.CommandTransport{Command: cmd}), nil)
//
// [Client.Connect] installs the middleware and this wrapper in one call.
// A *mcp.StreamableClientTransport or *mcp.SSEClientTransport is copied
// with its HTTP client's transport wrapped; any other transport (stdio's,
// a command's, in memory) has its connection's writes observed. Without it
// the middleware still traces, classifies and governs every request, but a
// server's death over HTTP reads as the SDK words it.
func (c *Client) Transport(t mcp.Transport) mcp.Transport {
	switch t := t.(type) {
	case *mcp.StreamableClientTransport:
		cp := *t
		cp.HTTPClient = observed(t.HTTPClient, t.Endpoint, c.cfg.Secrets)
		return &cp
	case *mcp.SSEClientTransport:
		cp := *t
		cp.HTTPClient = observed(t.HTTPClient, t.Endpoint, c.cfg.Secrets)
		return &cp
	case *pipeTransport:
		return t // wrapped already
	case *mcp.CommandTransport, *mcp.StdioTransport, *mcp.IOTransport, *mcp.InMemoryTransport:
		return &pipeTransport{inner: t, kv: []attribute.KeyValue{keyNetworkTransport.String(transportPipe)}}
	case nil:
		return nil
	}
	return &pipeTransport{inner: t}
}

// noteKey carries a request's note from its span to the transport.
type noteKey struct{}

// note is what the transport saw of one request: its id, the network, an
// HTTP error answer, and how the session fared beneath it.
type note struct {
	span trace.Span
	// cancel ends the request's wait at once when the transport sees that
	// its answer can never come (its stream's resumption refused): the SDK
	// would otherwise retry the resumption for many seconds against a
	// server that is gone.
	cancel context.CancelCauseFunc

	mu  sync.Mutex
	kv  []attribute.KeyValue // the transport's attributes, for the metric too
	api *policies.Error      // an HTTP answer of status 400 or more
	// malformed: the answer to the call was JSON that is not JSON-RPC,
	// or not JSON, on which the SDK closes the session.
	malformed bool
	// lost is why the request never reached the server: the connection
	// was refused, the pipe's write failed.
	lost error
	// written: the request went out (the pipe took it, or an HTTP
	// connection carried it), so the server may have received it whatever
	// the SDK says of the session afterwards.
	written bool
	// ended is how the transport saw the session end beneath the request:
	// the answer's stream cut, its resumption refused.
	ended error
	// claimed: the request's message went out; a later one under its
	// context is not the request.
	claimed bool
	// session is the Mcp-Session-Id the request carried, and rt the HTTP
	// transport that carried it: the session's standalone stream may end
	// it for every request in flight.
	session string
	rt      *roundTripper
}

func noteFrom(ctx context.Context) *note {
	n, _ := ctx.Value(noteKey{}).(*note)
	return n
}

// claim reports whether the message the transport sends now, under the
// request's context, is the request: only the first is. A later one is the
// SDK's notifications/cancelled for it, sent when its wait ends (with the
// context's values, without its cancellation), often to a server already
// gone; whether that one arrives says nothing of whether the request did.
func (n *note) claim() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	first := !n.claimed
	n.claimed = true
	return first
}

// sent records what the transport saw of the request as it went out.
func (n *note) sent(id string, kv []attribute.KeyValue) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.kv = append(n.kv[:0], kv...)
	n.mu.Unlock()
	if n.span == nil {
		return
	}
	if id != "" {
		n.span.SetAttributes(keyJSONRPCRequestID.String(id))
	}
	n.span.SetAttributes(kv...)
}

func (n *note) attributes() []attribute.KeyValue {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]attribute.KeyValue(nil), n.kv...)
}

func (n *note) malformedAnswer() bool {
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.malformed
}

func (n *note) httpError() *policies.Error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.api
}

// lose records that the request never reached the server.
func (n *note) lose(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lost == nil {
		n.lost = err
	}
}

// wrote records that the request went out on a connection.
func (n *note) wrote() {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.written = true
	n.mu.Unlock()
}

// delivered reports whether the request went out on a connection.
func (n *note) delivered() bool {
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.written
}

// undelivered is why the request never reached the server, nil when it
// did or the transport could not tell.
func (n *note) undelivered() error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.written {
		return nil
	}
	return n.lost
}

// end records that the session ended beneath the request; stop also ends
// the request's wait.
func (n *note) end(err error, stop bool) {
	n.mu.Lock()
	if n.ended == nil {
		n.ended = err
	}
	ended, cancel := n.ended, n.cancel
	n.mu.Unlock()
	if stop && cancel != nil {
		cancel(ended)
	}
}

// sessionEnded is how the session ended beneath the request, as this
// request's exchanges or the session's standalone stream showed it; nil
// when the transport saw no end.
func (n *note) sessionEnded() error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	ended, rt, session := n.ended, n.rt, n.session
	n.mu.Unlock()
	if ended != nil {
		return ended
	}
	if rt != nil && session != "" {
		return rt.endedSession(session)
	}
	return nil
}

// pipeTransport observes the writes of a transport's connection.
type pipeTransport struct {
	inner mcp.Transport
	kv    []attribute.KeyValue
}

func (t *pipeTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &pipeConn{Connection: conn, kv: t.kv}, nil
}

type pipeConn struct {
	mcp.Connection
	kv []attribute.KeyValue
}

func (c *pipeConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	n := noteFrom(ctx)
	if n != nil && !n.claim() {
		n = nil
	}
	if n != nil {
		if req, ok := msg.(*jsonrpc.Request); ok {
			id := ""
			if req.IsCall() {
				id = idString(req.ID.Raw())
			}
			n.sent(id, c.kv)
		}
	}
	err := c.Connection.Write(ctx, msg)
	switch {
	case n == nil:
	case err == nil:
		n.wrote()
	case ctx.Err() == nil:
		// The pipe would not take it: the server's process has gone, and
		// nothing of the request reached it.
		n.lose(err)
	}
	return err
}

// idString is a JSON-RPC id as the conventions write it: a number in
// decimal, a string as it is.
func idString(raw any) string {
	switch v := raw.(type) {
	case nil:
		return ""
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case json.Number:
		return v.String()
	}
	return fmt.Sprint(raw)
}

// observed is an HTTP client whose transport tells each request's note
// what it saw.
func observed(hc *http.Client, endpoint string, secrets []string) *http.Client {
	cp := http.Client{}
	if hc != nil {
		cp = *hc
	}
	base := cp.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	if rt, ok := base.(*roundTripper); ok {
		base = rt.base // wrapped already
	}
	kv := []attribute.KeyValue{
		keyNetworkTransport.String(transportTCP),
		keyNetworkProtocolName.String("http"),
	}
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		host, port := u.Hostname(), u.Port()
		if port == "" {
			port = map[string]string{"https": "443"}[u.Scheme]
			if port == "" {
				port = "80"
			}
		}
		kv = append(kv, semconv.ServerAddressKey.String(host))
		if p, err := strconv.Atoi(port); err == nil {
			kv = append(kv, semconv.ServerPortKey.Int(p))
		}
	}
	cp.Transport = &roundTripper{base: base, kv: kv, secrets: secrets}
	return &cp
}

// roundTripper observes the HTTP exchanges of Streamable HTTP (and SSE)
// sessions: a request's POST, the GET that resumes its answer's stream,
// and each session's standalone stream.
type roundTripper struct {
	base    http.RoundTripper
	kv      []attribute.KeyValue
	secrets []string // redacted from an error answer's message

	mu sync.Mutex
	// streaming are the sessions whose standalone stream was open once;
	// ended those whose standalone stream could not be opened again: the
	// server is gone, and with it the session.
	streaming map[string]bool
	ended     map[string]error
}

// maxPeek bounds what is read of an error answer's body for its code.
const maxPeek = 64 << 10

const sessionIDHeader = "Mcp-Session-Id"

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	n := noteFrom(req.Context())
	switch {
	case req.Method == http.MethodPost && n != nil:
		return rt.post(req, n)
	case req.Method == http.MethodGet && n != nil:
		return rt.resume(req, n)
	case req.Method == http.MethodGet:
		return rt.standalone(req)
	}
	return rt.base.RoundTrip(req)
}

// post sends a request's POST and notes what came of it.
func (rt *roundTripper) post(req *http.Request, n *note) (*http.Response, error) {
	if !n.claim() {
		return rt.base.RoundTrip(req)
	}
	id := requestID(req)
	n.mu.Lock()
	n.rt, n.session = rt, req.Header.Get(sessionIDHeader)
	n.mu.Unlock()
	// A request whose bytes all went out may have reached the server,
	// whatever happens to its wait afterwards: the transport says so when
	// its write ends, which can be after a canceled wait returned (the
	// session ended beneath it), so it is noted then, not read off the
	// round trip's error.
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(w httptrace.WroteRequestInfo) {
			if w.Err == nil {
				n.wrote()
			}
		},
	}))
	resp, err := rt.base.RoundTrip(req)
	kv := append([]attribute.KeyValue(nil), rt.kv...)
	switch {
	case err == nil:
		n.wrote()
	case req.Context().Err() != nil:
	case refused(err):
		// No connection, so no byte of the request reached a server.
		n.lose(err)
	default:
		// The connection broke before the server answered (its process
		// died, it was reset): as the pipe's end over stdio, the session
		// ended with it. The request may have reached the server.
		n.wrote()
		n.end(fmt.Errorf("the request's connection broke: %w", err), false)
	}
	if resp != nil {
		v := strconv.Itoa(resp.ProtoMajor)
		if resp.ProtoMajor == 1 {
			v += "." + strconv.Itoa(resp.ProtoMinor)
		}
		kv = append(kv, keyNetworkProtocolVersion.String(v))
		switch ct := mediaType(resp.Header.Get("Content-Type")); {
		case resp.StatusCode >= 400:
			api := peekError(resp)
			api.Message = redact.Text(api.Message, rt.secrets, 0)
			n.mu.Lock()
			n.api = api
			n.mu.Unlock()
			if n.span != nil {
				n.span.SetAttributes(semconv.HTTPResponseStatusCodeKey.Int(resp.StatusCode))
			}
		case id != "" && ct == "application/json":
			bad := !peekJSON(resp)
			n.mu.Lock()
			n.malformed = bad
			n.mu.Unlock()
		case id != "" && ct == "text/event-stream" && resp.Body != nil:
			resp.Body = &watchedBody{ReadCloser: resp.Body, ctx: req.Context(), n: n}
		}
	}
	n.sent(id, kv)
	return resp, err
}

// resume sends the GET that resumes a request's answer stream. The SDK
// resumes a stream that was cut; a server that refuses the resumption (no
// one listens, the session is unknown, a gateway says its upstream is gone)
// has ended the session, and the answer can never come: the request stops
// waiting at once.
func (rt *roundTripper) resume(req *http.Request, n *note) (*http.Response, error) {
	resp, err := rt.base.RoundTrip(req)
	switch {
	case err != nil && req.Context().Err() == nil:
		n.end(fmt.Errorf("resuming the answer's stream: %w", err), true)
	case err == nil && resp.StatusCode >= 400:
		n.end(fmt.Errorf("resuming the answer's stream: %s", resp.Status), true)
	}
	return resp, err
}

// standalone sends a GET of a session's standalone stream: once it was
// open, a server that refuses to open it again has ended the session.
func (rt *roundTripper) standalone(req *http.Request) (*http.Response, error) {
	resp, err := rt.base.RoundTrip(req)
	id := req.Header.Get(sessionIDHeader)
	if id == "" || req.Context().Err() != nil {
		return resp, err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	switch {
	case err == nil && resp.StatusCode < 300 && mediaType(resp.Header.Get("Content-Type")) == "text/event-stream":
		if rt.streaming == nil {
			rt.streaming = map[string]bool{}
		}
		rt.streaming[id] = true
	case !rt.streaming[id] || err == nil && resp.StatusCode == http.StatusMethodNotAllowed:
		// A server without a standalone stream, or one that never had it
		// open: nothing ended.
	case err != nil:
		rt.endLocked(id, fmt.Errorf("reopening the session's standalone stream: %w", err))
	case resp.StatusCode >= 400:
		rt.endLocked(id, fmt.Errorf("reopening the session's standalone stream: %s", resp.Status))
	}
	return resp, err
}

func (rt *roundTripper) endLocked(session string, err error) {
	if rt.ended == nil {
		rt.ended = map[string]error{}
	}
	if _, ok := rt.ended[session]; !ok {
		rt.ended[session] = err
	}
}

// endedSession is how the session's standalone stream showed it ended, nil
// when it did not.
func (rt *roundTripper) endedSession(session string) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.ended[session]
}

// watchedBody is a request's answer stream: cut before its end (the
// server's process died, its connection reset), the session ended with it,
// as a pipe's end ends one over stdio.
type watchedBody struct {
	io.ReadCloser
	ctx context.Context // the request's: its end cuts the stream on purpose
	n   *note
}

func (b *watchedBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && b.ctx.Err() == nil && !errors.Is(err, http.ErrBodyReadAfterClose) {
		b.n.end(fmt.Errorf("the answer's stream was cut: %w", err), false)
	}
	return k, err
}

// refused reports whether err is an HTTP request that found no server: the
// dial failed (refused, unreachable, no such host).
func refused(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// requestID reads the id of the JSON-RPC request in an HTTP request's
// body, which the SDK makes rewindable. It reads tokens up to the id, which
// the SDK writes before the params, so that the body's size does not
// matter.
func requestID(req *http.Request) string {
	if req.GetBody == nil {
		return ""
	}
	body, err := req.GetBody()
	if err != nil {
		return ""
	}
	defer body.Close()
	return jsonID(body)
}

// jsonID is the top-level "id" member of the JSON object r holds, "" when
// it has none or is not an object.
func jsonID(r io.Reader) string {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return ""
		}
		if key == "id" {
			var id any
			if dec.Decode(&id) != nil {
				return ""
			}
			return idString(id)
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}

// peekJSON reports whether a JSON answer's body is JSON, leaving it for the
// SDK as it was; a body too long to peek at is taken to be.
func peekJSON(resp *http.Response) bool {
	if resp.Body == nil {
		return true
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, maxPeek+1))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), resp.Body), resp.Body}
	return err != nil || len(buf) > maxPeek || json.Valid(buf)
}

func mediaType(ct string) string {
	t, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return t
}

// peekError reads an HTTP error answer as retrace reads a provider's (its
// status, code and Retry-After), leaving its body for the SDK as it was.
func peekError(resp *http.Response) *policies.Error {
	var buf []byte
	if resp.Body != nil {
		buf, _ = io.ReadAll(io.LimitReader(resp.Body, maxPeek))
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), resp.Body), resp.Body}
	}
	return policies.ErrorFrom(&http.Response{StatusCode: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(buf))})
}
