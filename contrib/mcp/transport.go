package retracemcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// Transport returns t with what only the transport sees written on each
// request's span: the JSON-RPC request's id (jsonrpc.request.id) and the
// network (network.transport; over Streamable HTTP also
// network.protocol.name and .version, server.address and server.port, and
// an HTTP error status, with its Retry-After, for the classification). It
// changes nothing of what is sent:
//
//	cs, err := client.Connect(ctx, rc.Transport(&mcp.CommandTransport{Command: cmd}), nil)
//
// A *mcp.StreamableClientTransport or *mcp.SSEClientTransport is copied
// with its HTTP client's transport wrapped; any other transport (stdio's,
// a command's, in memory) has its connection's writes observed. Without it
// the middleware still traces, classifies and governs every request.
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
	case *mcp.CommandTransport, *mcp.StdioTransport, *mcp.IOTransport, *mcp.InMemoryTransport:
		return &pipeTransport{inner: t, kv: []attribute.KeyValue{telemetry.NetworkTransport.String(telemetry.NetworkTransportPipe)}}
	case nil:
		return nil
	}
	return &pipeTransport{inner: t}
}

// noteKey carries a request's note from its span to the transport.
type noteKey struct{}

// note is what the transport saw of one request: its id, the network, and
// an HTTP error answer.
type note struct {
	span trace.Span

	mu  sync.Mutex
	kv  []attribute.KeyValue // the transport's attributes, for the metric too
	api *policies.APIError   // an HTTP answer of status 400 or more
	// malformed: the answer to the call was JSON that is not JSON-RPC,
	// or not JSON, on which the SDK closes the session.
	malformed bool
}

func noteFrom(ctx context.Context) *note {
	n, _ := ctx.Value(noteKey{}).(*note)
	return n
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
		n.span.SetAttributes(telemetry.JSONRPCRequestID.String(id))
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

func (n *note) httpError() *policies.APIError {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.api
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
	if n := noteFrom(ctx); n != nil {
		if req, ok := msg.(*jsonrpc.Request); ok {
			id := ""
			if req.IsCall() {
				id = idString(req.ID.Raw())
			}
			n.sent(id, c.kv)
		}
	}
	return c.Connection.Write(ctx, msg)
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
	kv := []attribute.KeyValue{
		telemetry.NetworkTransport.String(telemetry.NetworkTransportTCP),
		telemetry.NetworkProtocolName.String("http"),
	}
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		host, port := u.Hostname(), u.Port()
		if port == "" {
			port = map[string]string{"https": "443"}[u.Scheme]
			if port == "" {
				port = "80"
			}
		}
		kv = append(kv, telemetry.ServerAddress.String(host))
		if p, err := strconv.Atoi(port); err == nil {
			kv = append(kv, telemetry.ServerPort.Int(p))
		}
	}
	cp.Transport = &roundTripper{base: base, kv: kv, secrets: secrets}
	return &cp
}

type roundTripper struct {
	base    http.RoundTripper
	kv      []attribute.KeyValue
	secrets []string // redacted from an error answer's message
}

// maxPeek bounds what is read of a request's body for its id, and of an
// error answer's for its code.
const maxPeek = 64 << 10

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	n := noteFrom(req.Context())
	if n == nil || req.Method != http.MethodPost {
		return rt.base.RoundTrip(req)
	}
	id := requestID(req)
	resp, err := rt.base.RoundTrip(req)
	kv := append([]attribute.KeyValue(nil), rt.kv...)
	if resp != nil {
		v := strconv.Itoa(resp.ProtoMajor)
		if resp.ProtoMajor == 1 {
			v += "." + strconv.Itoa(resp.ProtoMinor)
		}
		kv = append(kv, telemetry.NetworkProtocolVersion.String(v))
		switch {
		case resp.StatusCode >= 400:
			api := peekError(resp)
			api.Message = policies.Redact(api.Message, rt.secrets...)
			n.mu.Lock()
			n.api = api
			n.mu.Unlock()
		case id != "" && mediaType(resp.Header.Get("Content-Type")) == "application/json":
			bad := !peekJSON(resp)
			n.mu.Lock()
			n.malformed = bad
			n.mu.Unlock()
		}
	}
	n.sent(id, kv)
	return resp, err
}

// requestID reads the id of the JSON-RPC request in an HTTP request's body,
// which the SDK makes rewindable.
func requestID(req *http.Request) string {
	if req.GetBody == nil {
		return ""
	}
	body, err := req.GetBody()
	if err != nil {
		return ""
	}
	defer body.Close()
	raw, err := io.ReadAll(io.LimitReader(body, maxPeek))
	if err != nil {
		return ""
	}
	var msg struct {
		ID any `json:"id"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&msg) != nil {
		return ""
	}
	return idString(msg.ID)
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
func peekError(resp *http.Response) *policies.APIError {
	var buf []byte
	if resp.Body != nil {
		buf, _ = io.ReadAll(io.LimitReader(resp.Body, maxPeek))
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), resp.Body), resp.Body}
	}
	return policies.APIErrorFrom(&http.Response{StatusCode: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(buf))})
}
