// Package faultserver is an MCP server made with the official Go SDK whose
// tools fail on purpose, for contrib/mcp's tests and demo: it runs as a
// child process, over stdio or Streamable HTTP on 127.0.0.1, installs
// retracemcp's server middleware, and tells its parent, one JSON line on
// stderr each, every request it received and the trace context it came
// with.
package faultserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// Event is one line the server writes on stderr.
type Event struct {
	Event string `json:"event"` // listening, request, hang, crash
	URL   string `json:"url,omitempty"`
	// A request's method and tool, and the trace context its params._meta
	// carried (the W3C traceparent, unparsed).
	Method      string `json:"method,omitempty"`
	Tool        string `json:"tool,omitempty"`
	Traceparent string `json:"traceparent,omitempty"`
	N           int64  `json:"n,omitempty"` // the server's count of requests so far
}

// SecretEnv names the variable whose value the leak tool echoes in its
// failure, as a server that quotes its credentials would; RedactEnv the
// variable of the secret the server's middleware knows to redact.
const (
	SecretEnv = "FAULTSERVER_SECRET"
	RedactEnv = "FAULTSERVER_REDACT"
)

// Run serves until stdin closes (stdio) or the process is stopped (HTTP).
func Run(ctx context.Context, args []string, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer) error {
	fs := flag.NewFlagSet("faultserver", flag.ContinueOnError)
	addr := fs.String("http", "", "serve Streamable HTTP on this address (127.0.0.1:0) instead of stdio")
	name := fs.String("name", "faults", "the server's name, as its initialize result gives it")
	fail := fs.Int("fail", 2, "how many calls of the flaky tool fail before it answers")
	spans := fs.String("spans", "", "append each of the server's spans to this file, one line of OTLP JSON each")
	crashOnce := fs.String("crash-once", "", "the crash tool exits only when this file does not exist yet, and makes it: a server that crashes once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s := &server{log: &eventLog{w: stderr}, fail: int64(*fail), secret: os.Getenv(SecretEnv), crashOnce: *crashOnce}

	var procs []setup.Option
	if *spans != "" {
		f, err := os.OpenFile(*spans, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		procs = append(procs, setup.WithSpanProcessor(&spanFile{w: f}))
	}
	tp, shutdown, err := setup.NewTracerProvider(ctx, append(procs, setup.WithServiceName(*name), setup.WithConsole(io.Discard), setup.WithWarnings(stderr))...)
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.Background()) }()
	s.tracer = tp.Tracer("faultserver")

	srv := mcp.NewServer(&mcp.Implementation{Name: *name, Version: "1.0.0"}, nil)
	// The request log first: it sees every request, the ones the
	// middleware beneath it fails too.
	var secrets []string
	if v := os.Getenv(RedactEnv); v != "" {
		secrets = append(secrets, v)
	}
	srv.AddReceivingMiddleware(s.logRequests, retracemcp.ServerMiddleware(retracemcp.ServerConfig{TracerProvider: tp, Secrets: secrets}))
	s.addTools(srv)

	if *addr == "" {
		out := &lockedWriter{w: stdout}
		s.raw = out
		return srv.Run(ctx, &mcp.IOTransport{Reader: stdin, Writer: out})
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := &http.Server{Handler: s.httpFront(h)}
	url := "http://" + ln.Addr().String() + "/mcp"
	s.log.write(Event{Event: "listening", URL: url})
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type server struct {
	log    *eventLog
	tracer trace.Tracer
	fail   int64
	secret string
	raw    io.Writer // stdout over stdio, for the garbage tool
	// crashOnce, if set, is the file whose absence makes the crash tool
	// exit; it makes the file first.
	crashOnce string

	requests atomic.Int64
	flaky    atomic.Int64
}

// logRequests writes a line for every request the server receives, with
// the trace context its params._meta carried.
func (s *server) logRequests(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ev := Event{Event: "request", Method: method, N: s.requests.Add(1)}
		if p := req.GetParams(); p != nil {
			if tp, ok := p.GetMeta()["traceparent"].(string); ok {
				ev.Traceparent = tp
			}
			if c, ok := p.(*mcp.CallToolParamsRaw); ok {
				ev.Tool = c.Name
			}
		}
		s.log.write(ev)
		return next(ctx, method, req)
	}
}

type textArgs struct {
	Text string `json:"text,omitempty" jsonschema:"the text"`
}

type queryArgs struct {
	Query string `json:"query" jsonschema:"what to search for"`
}

func (s *server) addTools(srv *mcp.Server) {
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
			if n := s.flaky.Add(1); n <= s.fail {
				return retracemcp.ToolError(&policies.Error{StatusCode: http.StatusServiceUnavailable, Code: "server_error",
					Message: fmt.Sprintf("the index is rebuilding (failure %d of %d)", n, s.fail)}), nil, nil
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
			return nil, nil, fmt.Errorf("upstream refused the request: Authorization: Bearer %s (key %s)", s.secret, s.secret)
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
			s.log.write(Event{Event: "hang"})
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "crash", Description: "Exits the server's process."},
		func(context.Context, *mcp.CallToolRequest, textArgs) (*mcp.CallToolResult, any, error) {
			if s.crashOnce != "" {
				f, err := os.OpenFile(s.crashOnce, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err != nil {
					return text("recovered: this server was started after the crash"), nil, nil
				}
				_ = f.Close()
			}
			s.log.write(Event{Event: "crash"})
			os.Exit(3)
			return nil, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "garbage", Description: "Answers with a line that is not JSON-RPC."},
		func(context.Context, *mcp.CallToolRequest, textArgs) (*mcp.CallToolResult, any, error) {
			if s.raw != nil {
				_, _ = io.WriteString(s.raw, "{\"jsonrpc\": \"2.0\", \"id\": this is not JSON\n")
			}
			return text("(the line before this answer was garbage)"), nil, nil
		})
}

// MaxBody is the largest request body the server takes over HTTP, as a
// server behind a body limit does: a larger one is refused with 413.
const MaxBody = 256 << 10

// httpFront is what the server does over HTTP before the SDK's handler sees
// a request: a body over MaxBody is refused (413) with a JSON-RPC error, a
// call of the garbage tool is answered with a body that is not JSON-RPC.
// Both are requests the server received, and are logged.
func (s *server) httpFront(h http.Handler) http.Handler {
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
				s.log.write(Event{Event: "request", Method: msg.Method, Tool: msg.Params.Name, N: s.requests.Add(1)})
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				_, _ = fmt.Fprintf(w, `{"jsonrpc": "2.0", "id": %s, "error": {"code": -32600, "message": "request body of %d bytes is over the limit of %d"}}`,
					orNull(msg.ID), len(body), MaxBody)
				return
			case parsed && msg.Method == "tools/call" && msg.Params.Name == "garbage":
				s.log.write(Event{Event: "request", Method: msg.Method, Tool: msg.Params.Name, N: s.requests.Add(1)})
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

// eventLog writes events as JSON lines, one at a time.
type eventLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *eventLog) write(ev Event) {
	b, _ := json.Marshal(ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(b, '\n'))
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

// spanFile writes each span as it ends, so that a process that exits
// abruptly has written the spans that ended before.
type spanFile struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *spanFile) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (f *spanFile) OnEnd(s sdktrace.ReadOnlySpan) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = setup.WriteOTLPJSON(f.w, []sdktrace.ReadOnlySpan{s})
}
func (f *spanFile) Shutdown(context.Context) error   { return nil }
func (f *spanFile) ForceFlush(context.Context) error { return nil }
