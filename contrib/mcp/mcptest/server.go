package mcptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
	"github.com/retrace-go/retrace/policies"
)

// Config says how a [Server] fails and where it tells what it received.
type Config struct {
	// Name is the server's name in its initialize result; "faults" when
	// empty.
	Name string
	// FailFirst is how many calls of the flaky tool fail before it
	// answers; 0 and it answers at once.
	FailFirst int
	// Secret is what the leak tool quotes in its failure, as a server
	// that quotes its credentials does.
	Secret string
	// Redact are the values the server's middleware redacts from what it
	// sends and from its spans ([retracemcp.ServerConfig.Secrets]).
	Redact []string
	// CrashOnce, if set, is a file: the crash tool exits only when it does
	// not exist yet, and creates it, so that the server started again
	// after the crash answers.
	CrashOnce string
	// TracerProvider traces the server: a SERVER span per request, in the
	// caller's trace, and the server's own work beneath it. Nil: the
	// global one.
	TracerProvider trace.TracerProvider
	// OnEvent, if set, is called with each [Event] as it happens, from the
	// goroutine that handles the request.
	OnEvent func(Event)
}

// Event is what the server tells as it happens: a request it received
// (Kind "request"), a call of hang that now hangs ("hang"), a crash about
// to happen ("crash").
type Event struct {
	Kind string `json:"kind"`
	// A request's method and tool, and the trace context its params._meta
	// carried (the W3C traceparent, unparsed).
	Method      string `json:"method,omitempty"`
	Tool        string `json:"tool,omitempty"`
	Traceparent string `json:"traceparent,omitempty"`
	N           int64  `json:"n,omitempty"` // the server's count of requests so far
}

// MaxBody is the largest request body [Server.Handler] takes, as a server
// behind a body limit does: a larger one is answered 413.
const MaxBody = 256 << 10

// Server is an MCP server whose tools fail on purpose. Its counts (the
// requests, the flaky tool's calls) are the Server's, across its sessions.
type Server struct {
	cfg    Config
	tracer trace.Tracer

	requests atomic.Int64
	flaky    atomic.Int64
}

// NewServer returns a server as cfg says.
func NewServer(cfg Config) *Server {
	if cfg.Name == "" {
		cfg.Name = "faults"
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Server{cfg: cfg, tracer: tp.Tracer("github.com/retrace-go/retrace/contrib/mcp/mcptest")}
}

// Serve serves one session over in and out, newline-delimited JSON-RPC as
// a server over stdio speaks it (os.Stdin and os.Stdout, in a process of
// its own), until in ends or ctx is done.
func (s *Server) Serve(ctx context.Context, in io.ReadCloser, out io.WriteCloser) error {
	w := &lockedWriter{w: out}
	return s.mcpServer(w).Run(ctx, &mcp.IOTransport{Reader: in, Writer: w})
}

// Handler serves Streamable HTTP. It refuses a body over [MaxBody] with 413
// and a JSON-RPC error, and answers a call of the garbage tool with a body
// that is not JSON-RPC; both are requests the server received.
func (s *Server) Handler() http.Handler {
	srv := s.mcpServer(nil)
	return s.httpFront(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
}

// mcpServer is the SDK's server with the tools and middleware; raw, if
// set, is the stream its answers go to, for the garbage tool.
func (s *Server) mcpServer(raw io.Writer) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: s.cfg.Name, Version: "1.0.0"}, nil)
	// The request log first: it sees every request, the ones the
	// middleware beneath it fails too.
	srv.AddReceivingMiddleware(s.logRequests, retracemcp.ServerMiddleware(retracemcp.ServerConfig{TracerProvider: s.cfg.TracerProvider, Secrets: s.cfg.Redact}))
	s.addTools(srv, raw)
	return srv
}

func (s *Server) event(ev Event) {
	if s.cfg.OnEvent != nil {
		s.cfg.OnEvent(ev)
	}
}

// logRequests tells of every request the server receives, with the trace
// context its params._meta carried.
func (s *Server) logRequests(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ev := Event{Kind: "request", Method: method, N: s.requests.Add(1)}
		if p := req.GetParams(); p != nil {
			if tp, ok := p.GetMeta()["traceparent"].(string); ok {
				ev.Traceparent = tp
			}
			if c, ok := p.(*mcp.CallToolParamsRaw); ok {
				ev.Tool = c.Name
			}
		}
		s.event(ev)
		return next(ctx, method, req)
	}
}

type textArgs struct {
	Text string `json:"text,omitempty" jsonschema:"the text"`
}

type queryArgs struct {
	Query string `json:"query" jsonschema:"what to search for"`
}

func (s *Server) addTools(srv *mcp.Server, raw io.Writer) {
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Answers with its text."},
		func(_ context.Context, _ *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
			return text(a.Text), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "search_docs", Description: "Search the runbooks."},
		func(ctx context.Context, _ *mcp.CallToolRequest, a queryArgs) (*mcp.CallToolResult, any, error) {
			// The server's own work: its search backend, which is rate
			// limited for the length of the incident.
			_, span := s.tracer.Start(ctx, "search index")
			defer span.End()
			err := &policies.Error{StatusCode: http.StatusTooManyRequests, Code: "rate_limit_error", Message: "Too Many Requests"}
			span.SetStatus(codes.Error, err.Error())
			return retracemcp.ToolError(err), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "flaky", Description: "Fails its first calls, then answers."},
		func(_ context.Context, _ *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
			if n, fail := s.flaky.Add(1), int64(s.cfg.FailFirst); n <= fail {
				return retracemcp.ToolError(&policies.Error{StatusCode: http.StatusServiceUnavailable, Code: "server_error",
					Message: fmt.Sprintf("the index is rebuilding (failure %d of %d)", n, fail)}), nil, nil
			}
			return text("ok: " + a.Text), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "tool_error", Description: "Answers isError with a plain text."},
		func(context.Context, *mcp.CallToolRequest, textArgs) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("the index is corrupt: segment 7 fails its checksum")
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "internal", Description: "Answers with a JSON-RPC internal error."},
		func(context.Context, *mcp.CallToolRequest, textArgs) (*mcp.CallToolResult, any, error) {
			return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error: the database connection was lost"}
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "leak", Description: "Fails quoting its credentials."},
		func(context.Context, *mcp.CallToolRequest, textArgs) (*mcp.CallToolResult, any, error) {
			return nil, nil, fmt.Errorf("upstream refused the request: Authorization: Bearer %s (key %s)", s.cfg.Secret, s.cfg.Secret)
		})
	// strict validates its arguments itself, and answers invalid ones with
	// the protocol's error, as a server may.
	srv.AddTool(&mcp.Tool{Name: "strict", Description: "Answers its text; any other argument is invalid params.",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var a textArgs
			if err := json.Unmarshal(req.Params.Arguments, &a); err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid params: text must be a string"}
			}
			return text(a.Text), nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "hang", Description: "Never answers."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ textArgs) (*mcp.CallToolResult, any, error) {
			s.event(Event{Kind: "hang"})
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "crash", Description: "Exits the server's process."},
		func(context.Context, *mcp.CallToolRequest, textArgs) (*mcp.CallToolResult, any, error) {
			if s.cfg.CrashOnce != "" {
				f, err := os.OpenFile(s.cfg.CrashOnce, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err != nil {
					return text("recovered: this server was started after the crash"), nil, nil
				}
				_ = f.Close()
			}
			s.event(Event{Kind: "crash"})
			os.Exit(3)
			return nil, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "garbage", Description: "Answers with a line that is not JSON-RPC."},
		func(context.Context, *mcp.CallToolRequest, textArgs) (*mcp.CallToolResult, any, error) {
			if raw != nil {
				_, _ = io.WriteString(raw, "{\"jsonrpc\": \"2.0\", \"id\": this is not JSON\n")
			}
			return text("(the line before this answer was garbage)"), nil, nil
		})
}

// httpFront is what the server does over HTTP before the SDK's handler sees
// a request: a body over MaxBody is refused (413) with a JSON-RPC error, a
// call of the garbage tool is answered with a body that is not JSON-RPC.
// Both are requests the server received, and are told.
func (s *Server) httpFront(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Body != nil {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			parsed := json.Unmarshal(body, &msg) == nil
			switch {
			case len(body) > MaxBody:
				s.event(Event{Kind: "request", Method: msg.Method, Tool: msg.Params.Name, N: s.requests.Add(1)})
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				_, _ = fmt.Fprintf(w, `{"jsonrpc": "2.0", "id": %s, "error": {"code": -32600, "message": "request body of %d bytes is over the limit of %d"}}`,
					orNull(msg.ID), len(body), MaxBody)
				return
			case parsed && msg.Method == "tools/call" && msg.Params.Name == "garbage":
				s.event(Event{Kind: "request", Method: msg.Method, Tool: msg.Params.Name, N: s.requests.Add(1)})
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"jsonrpc": "2.0", "id": this is not JSON`)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r)
	})
}

func orNull(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	return string(raw)
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// lockedWriter serialises the SDK's writes and the garbage tool's.
type lockedWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return l.w.Close() }
