package retracemcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/tool"
)

// Config configures a [Client]. The zero value governs every tool as
// tool.New does (policies.ToolRetry, a breaker, a bulkhead of 8), traces on
// the tracer provider of the layer a call runs in, else the global one, and
// propagates W3C trace context and baggage in params._meta.
type Config struct {
	// Tool governs every tools/call, and Tools a tool's own, by the tool's
	// name: the retry, breaker, bulkhead, per-attempt timeout and clock, as
	// tool.New takes them. A tool's breaker is named "{server}/{tool}",
	// after the server's name in its initialize result (Breaker.Name is
	// ignored), and keeps its state in the Client: the calls of every
	// session to that server share it, a restarted one's too.
	Tool  tool.Config
	Tools map[string]tool.Config
	// Options configure the tool layers and the request spans: tracer
	// provider, meter provider and clock of retrace's layers.
	Options []middleware.Option
	// MeterProvider records the MCP metrics (mcp.client.operation.duration,
	// mcp.client.session.duration); nil → the global one.
	MeterProvider metric.MeterProvider
	// Propagator writes the trace context into each request's
	// params._meta; nil → the global propagator when one is set, else W3C
	// trace context and baggage.
	Propagator propagation.TextMapPropagator
	// Secrets are the credentials of the connections (an HTTP server's
	// bearer token): redacted by exact value wherever retrace writes the
	// text of a call, the failure the model reads included, besides the
	// patterns retrace redacts everywhere.
	Secrets []string
	// TraceOnly makes the middleware trace, classify and propagate every
	// request but govern none: for a caller whose tool calls have
	// governance of their own beneath no retrace tool layer. A tools/call
	// made inside a retrace tool layer (tool.New, the eino and genkit
	// adapters, [Server.Tools]) is that layer's attempt and is never
	// governed twice.
	TraceOnly bool
}

// Client puts MCP client sessions under retrace: install its
// [Client.Middleware] on an mcp.Client, and every request the client sends
// is a CLIENT span with the trace context in its params._meta, and every
// tools/call goes through retrace's tool governance. It is safe for
// concurrent use; make one per program and share it, since the tools'
// breakers live in it.
type Client struct {
	cfg      Config
	breakers state.State
	metrics  *clientMetrics

	mu        sync.Mutex
	installed map[*mcp.Client]bool // the clients Connect installed the middleware on
	layers    map[layerKey]middleware.Handler[*request, mcp.Result]
	tools     map[toolKey]*tool.Tool      // the governed tools of calls made directly on a session
	open      map[*mcp.ClientSession]bool // the sessions whose duration is being measured
	// watching are the goroutines that await the end of those sessions.
	watching sync.WaitGroup
}

type layerKey struct{ method, tool string }

type toolKey struct{ server, tool string }

// New returns a Client.
func New(cfg Config) *Client {
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	var st state.State = state.NewMemory()
	if cfg.Tool.Breaker.State != nil {
		st = cfg.Tool.Breaker.State
	}
	return &Client{
		cfg:       cfg,
		breakers:  st,
		metrics:   newClientMetrics(mp),
		installed: map[*mcp.Client]bool{},
		layers:    map[layerKey]middleware.Handler[*request, mcp.Result]{},
		tools:     map[toolKey]*tool.Tool{},
		open:      map[*mcp.ClientSession]bool{},
	}
}

// Middleware is the sending middleware to install on an mcp.Client, before
// it connects:
//
//	client.AddSendingMiddleware(rc.Middleware())
//
// Every request and notification the client sends is then a span of kind
// CLIENT named "{method}" ("tools/call {tool}" for a tool call), layer
// "mcp", each a leaf call counted in the enclosing layers' retrace.calls,
// with the trace context written into its params._meta. A tools/call made
// inside a retrace tool layer is that layer's attempt; one made anywhere
// else is governed as tool.New governs a Go tool: retried, refused by the
// tool's breaker, bounded by the task budget. Its caller still gets what the
// SDK gives: the last isError result when the tool's own answers failed,
// else the final error (a layer's *policies.Error that errors.As sees
// through to the server's).
func (c *Client) Middleware() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if ctx.Value(sendingKey{c}) == req {
				// Installed twice on one client: the outer one has this
				// request. (A request the SDK sends with its context, such
				// as a cancellation, is another request.)
				return next(ctx, method, req)
			}
			ctx = context.WithValue(ctx, sendingKey{c}, req)
			ctx = policies.WithSecrets(ctx, c.cfg.Secrets...)
			r := &request{method: method, req: req, next: next}
			c.watchSession(method, req)
			if method == methodToolsCall && !c.cfg.TraceOnly && !inToolLayer(ctx) {
				return c.govern(ctx, r)
			}
			res, err := c.send(ctx, r)
			if r.declined != nil {
				// The server declined to be discovered: the SDK falls back
				// to initialize on this error, which the span does not call
				// a failure.
				return nil, r.declined
			}
			if failed, ok := errors.AsType[*ToolFailure](err); ok && failed.Result != nil {
				// isError is an answer: the SDK's caller reads it as one.
				return failed.Result, nil
			}
			return res, err
		}
	}
}

// sendingKey marks the request the Client's middleware is sending.
type sendingKey struct{ c *Client }

// Connect connects client to a server over t with its requests under
// retrace: it installs [Client.Middleware] on client (once per client,
// however many sessions it connects; one installed by hand is not doubled)
// and wraps t ([Client.Transport]), so that request ids, the network and a
// server's death over HTTP are seen. It is the one call to make in a
// [Client.Start] function:
//
//	srv, err := rc.Start(ctx, func(ctx context.Context) (*mcp.ClientSession, error) {
//		return rc.Connect(ctx, client, &mcp.StreamableClientTransport{Endpoint: url}, nil)
//	})
func (c *Client) Connect(ctx context.Context, client *mcp.Client, t mcp.Transport, opts *mcp.ClientSessionOptions) (*mcp.ClientSession, error) {
	c.mu.Lock()
	if !c.installed[client] {
		c.installed[client] = true
		client.AddSendingMiddleware(c.Middleware())
	}
	c.mu.Unlock()
	return client.Connect(ctx, c.Transport(t), opts)
}

// inToolLayer reports whether ctx is an attempt of a retrace tool layer:
// a tools/call made there is the attempt's request, governed already.
func inToolLayer(ctx context.Context) bool {
	a, ok := middleware.AttemptFrom(ctx)
	return ok && a.Layer == "tool"
}

// request is one request the client sends, as its layer carries it.
type request struct {
	method string
	req    mcp.Request
	next   mcp.MethodHandler
	// result is the answer of the last attempt, set by send: a tool's
	// isError answer reaches the SDK's caller although the layer failed.
	result mcp.Result
	// declined is a server's refusal of server/discover, which is version
	// negotiation, not a failure: the span ends well and the SDK, given
	// the error, falls back to initialize.
	declined error
}

// restartKey marks the calls of a [Server] that restarts its session.
type restartKey struct{}

func restartableFrom(ctx context.Context) bool {
	v, _ := ctx.Value(restartKey{}).(bool)
	return v
}

// send makes one request through its layer: the request span.
func (c *Client) send(ctx context.Context, r *request) (mcp.Result, error) {
	var kv []attribute.KeyValue
	if cs, ok := r.req.GetSession().(*mcp.ClientSession); ok && cs != nil {
		if id := cs.ID(); id != "" {
			kv = append(kv, keySessionID.String(id))
		}
	}
	if v := protocolVersion(r.req); v != "" {
		kv = append(kv, keyProtocolVersion.String(v))
	}
	if len(kv) > 0 {
		ctx = middleware.WithCallAttributes(ctx, kv...)
	}
	return c.layer(r.method, toolName(r.req))(ctx, r)
}

// layer returns the layer of a method's requests (and a tool's calls),
// made once.
func (c *Client) layer(method, tool string) middleware.Handler[*request, mcp.Result] {
	k := layerKey{method: method, tool: tool}
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.layers[k]; ok {
		return h
	}
	name := method
	kv := []attribute.KeyValue{keyMethodName.String(method)}
	if tool != "" {
		name += " " + tool
		kv = append(kv, semconv.GenAIToolNameKey.String(tool))
	}
	if method == methodToolsCall {
		kv = append(kv, semconv.GenAIOperationNameKey.String("execute_tool"))
	}
	opts := append(append([]middleware.Option{}, c.cfg.Options...),
		middleware.WithSpanName(name), middleware.WithSpanKind(trace.SpanKindClient), middleware.WithAttributes(kv...))
	switch {
	case handshake(method):
		// A session's set-up is no call of the server's work: under a
		// restart it happens inside a tool's attempt, and is not counted
		// as a call of that tool.
		opts = append(opts, middleware.WithUncounted(telemetry.UncountedHandshake))
	case strings.HasPrefix(method, "notifications/"):
		opts = append(opts, middleware.WithUncounted(telemetry.UncountedNotification))
	}
	h := middleware.Layer[*request, mcp.Result](layerMCP, middleware.Spec[mcp.Result]{}, opts...)(c.exchange)
	c.layers[k] = h
	return h
}

// exchange is a request span's handler: the request's trace context in its
// params._meta, the SDK's send, and what the answer means.
func (c *Client) exchange(ctx context.Context, r *request) (mcp.Result, error) {
	// The transport may end the request's wait (its answer can never
	// come); only the caller's context is the caller's end.
	sctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	n := &note{span: trace.SpanFromContext(ctx), cancel: stop}
	sctx = context.WithValue(sctx, noteKey{}, n)
	inject(sctx, c.cfg.Propagator, r.req.GetParams())
	start := time.Now()
	res, err := r.next(sctx, r.method, r.req)
	err = redactErr(classify(ctx, r, res, err, n), c.cfg.Secrets)
	if e, ok := errors.AsType[*RPCError](err); ok && n.span.IsRecording() {
		n.span.SetAttributes(keyRPCStatusCode.String(e.ErrorType()))
	}
	if err != nil && r.method == methodDiscover && declinedDiscovery(err, n) {
		r.declined, err = err, nil
	}
	if err != nil && (n.undelivered() != nil || errors.Is(err, mcp.ErrConnectionClosed) && !n.delivered()) {
		// Nothing was written: the SDK refused it on a closed session, or
		// the transport found no one to take it. A request that went out
		// before the session closed beneath it may have reached the server:
		// it is counted.
		err = middleware.Unsent(err)
	}
	r.result = res
	c.metrics.operation(ctx, time.Since(start), r, n, err)
	return res, err
}

// declinedDiscovery reports whether err is a server's answer to
// server/discover (a JSON-RPC error, or an HTTP status the server chose),
// by which a server of an earlier protocol version says it does not know
// the method: the client then initializes, as the protocol asks.
func declinedDiscovery(err error, n *note) bool {
	if _, ok := errors.AsType[*RPCError](err); ok {
		return true
	}
	api := n.httpError()
	return api != nil && api.StatusCode >= 400 && api.StatusCode < 500
}

// govern runs a tools/call made outside any tool layer through its tool's
// governance, each attempt one request.
func (c *Client) govern(ctx context.Context, r *request) (mcp.Result, error) {
	p, _ := r.req.GetParams().(*mcp.CallToolParams)
	if p == nil {
		return c.send(ctx, r)
	}
	cs, _ := r.req.GetSession().(*mcp.ClientSession)
	t := c.directTool(serverName(cs), p.Name)
	args, err := json.Marshal(p.Arguments)
	if err != nil {
		return nil, &policies.Error{Class: policies.Programming, Type: "invalid_arguments", Err: fmt.Errorf("%s: the arguments cannot be encoded: %w", p.Name, err)}
	}
	_, err = t.CallWith(ctx, string(args), func(ctx context.Context, _ string) (string, error) {
		res, err := c.send(ctx, r)
		if err != nil {
			return "", err
		}
		out, _ := res.(*mcp.CallToolResult)
		return Text(out), nil
	})
	if failed, ok := errors.AsType[*ToolFailure](err); ok && failed.Result != nil && r.result == mcp.Result(failed.Result) {
		// The tool's own last answer failed: the caller reads it, as
		// without retrace (the trace has the retries).
		return failed.Result, nil
	}
	if err != nil {
		return nil, err
	}
	return r.result, nil
}

// directTool returns the governed tool of a server's tool for the calls
// made directly on its sessions, made on its first call.
func (c *Client) directTool(server, name string) *tool.Tool {
	k := toolKey{server: server, tool: name}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.tools[k]; ok {
		return t
	}
	t := tool.New[json.RawMessage, string](name, nil, c.toolConfig(server, name, nil)) // each call brings its request
	c.tools[k] = t
	return t
}

// toolConfig is the governance of a server's tool: the Config's, its
// breaker named after the server and the tool and kept in the Client.
func (c *Client) toolConfig(server, name string, spec *mcp.Tool) tool.Config {
	cfg, ok := c.cfg.Tools[name]
	if !ok {
		cfg = c.cfg.Tool
	}
	cfg.Breaker.Name = server + "/" + name
	if cfg.Breaker.State == nil {
		cfg.Breaker.State = c.breakers
	}
	cfg.Options = append(append([]middleware.Option{}, c.cfg.Options...), cfg.Options...)
	if spec != nil {
		cfg.Description = spec.Description
		cfg.Parameters = schemaMap(spec.InputSchema)
	}
	return cfg
}

// serverName is the server's name as its initialize result gives it, else
// "mcp".
func serverName(cs *mcp.ClientSession) string {
	if cs != nil {
		if init := cs.InitializeResult(); init != nil && init.ServerInfo != nil && init.ServerInfo.Name != "" {
			return init.ServerInfo.Name
		}
	}
	return "mcp"
}

// toolName is the tool a tools/call calls, "" for another request.
func toolName(req mcp.Request) string {
	switch p := req.GetParams().(type) {
	case *mcp.CallToolParams:
		if p != nil {
			return p.Name
		}
	case *mcp.CallToolParamsRaw:
		if p != nil {
			return p.Name
		}
	}
	return ""
}

// schemaMap is a tool's input schema as a JSON object, nil when it is none.
func schemaMap(schema any) map[string]any {
	if schema == nil {
		return nil
	}
	if m, ok := schema.(map[string]any); ok {
		return m
	}
	b, err := json.Marshal(schema)
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

// watchSession starts measuring a session's duration at its first request
// (initialize, or server/discover): it ends when the session does, whoever
// closed it.
func (c *Client) watchSession(method string, req mcp.Request) {
	if method != methodInitialize && method != methodDiscover {
		return
	}
	cs, _ := req.GetSession().(*mcp.ClientSession)
	if cs == nil {
		return
	}
	c.mu.Lock()
	if c.open[cs] {
		c.mu.Unlock()
		return
	}
	c.open[cs] = true
	c.mu.Unlock()
	start := time.Now()
	// The goroutine lives as long as the session: Wait returns when it
	// closes, on either side.
	c.watching.Go(func() {
		err := cs.Wait()
		c.metrics.session(time.Since(start), cs, err)
		c.mu.Lock()
		delete(c.open, cs)
		c.mu.Unlock()
	})
}
