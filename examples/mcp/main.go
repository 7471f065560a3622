// Command mcp is the demo's mcp scenario, in a module of its own so that
// the MCP SDK stays out of the core's and the adapter ships no demo: the
// incident, with search_docs an MCP tool in a process of its own (package
// mcptest's server, this command run again with -serve), answering 429.
// An agent loop runs twice against it, once with a naive client and once
// under retrace, and the command prints what each run cost: the requests
// the MCP server received, the model's, the trace's leaf spans and
// retrace.calls. The demo (examples/agent) runs it:
//
//	go run -C examples/mcp . -json -spans FILE
//
// Both processes trace where the OTEL_* environment says (the server as
// retrace-mcp-docs), and -spans writes every span of both runs, the
// server's too, as OTLP JSON lines.
package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
	"github.com/retrace-go/retrace/contrib/mcp/mcptest"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
	"github.com/retrace-go/retrace/tool"
)

// The incident's bounds, as the demo's incident scenario has them.
const (
	maxSteps = 31
	budget   = 6 // retries per task, across all tools
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if err := serve(ctx, os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "mcp -serve:", err)
			os.Exit(1)
		}
		return
	}
	asJSON := flag.Bool("json", false, "print one JSON object")
	spans := flag.String("spans", "", "write every span of both runs, the MCP server's too, to `FILE` as OTLP JSON lines")
	scale := flag.Float64("time-scale", 0.01, "how fast the model calls' clock runs (the tools' waits pass at once)")
	model := flag.String("model", "gpt-4o-mini", "the model")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := run(ctx, *spans, *scale, *model)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp:", err)
		os.Exit(1)
	}
	if *asJSON {
		_ = json.NewEncoder(os.Stdout).Encode(rep)
		return
	}
	for _, s := range []struct {
		name string
		side side
	}{{"naive", rep.Naive}, {"retrace", rep.Governed}} {
		fmt.Printf("%-8s search_docs requests %2d, model requests %2d, leaf spans %2d, retrace.calls %2d, %s, trace %s\n",
			s.name, s.side.ServerRequests, s.side.ModelRequests, s.side.LeafSpans, s.side.Calls, s.side.Outcome, s.side.TraceID)
	}
}

// side is one run of the comparison.
type side struct {
	ServerRequests int    `json:"server_requests"` // tools/call search_docs the MCP server received
	ModelRequests  int    `json:"model_requests"`
	CacheCalls     int    `json:"cache_calls"` // calls of the other tool, a Go one
	ModelTurns     int    `json:"model_turns"`
	ToolCalls      int    `json:"tool_calls"`
	RetriesUsed    int    `json:"retries_used"`
	LeafSpans      int    `json:"leaf_spans"`
	Calls          int64  `json:"calls"`
	WorstCase      int64  `json:"worst_case"`
	Outcome        string `json:"outcome"`
	Answer         string `json:"answer,omitempty"`
	TraceID        string `json:"trace_id"`
	// ServerSpans are the MCP server's spans in the run's trace, and
	// ServerParents how many of its SERVER spans are children of the
	// client's request spans.
	ServerSpans   int `json:"server_spans"`
	ServerParents int `json:"server_parents"`
}

type report struct {
	Naive    side `json:"naive"`
	Governed side `json:"governed"`
}

func run(ctx context.Context, spansFile string, scale float64, model string) (report, error) {
	env := os.Getenv
	if x, err := setup.ReadEnv(env); err != nil {
		return report{}, err
	} else if !x.OTLP {
		env = func(k string) string {
			if k == "OTEL_TRACES_EXPORTER" {
				return "none"
			}
			return os.Getenv(k)
		}
	}
	st := &store{}
	tp, shutdown, err := setup.NewTracerProvider(ctx, setup.WithEnv(env), setup.WithSpanProcessor(st),
		setup.WithServiceName("retrace-mcp-agent"), setup.WithConsole(io.Discard))
	if err != nil {
		return report{}, err
	}
	defer func() { _ = shutdown(context.Background()) }()
	dir, err := os.MkdirTemp("", "retrace-mcp-demo-")
	if err != nil {
		return report{}, err
	}
	defer os.RemoveAll(dir)

	d := &demo{tp: tp, spans: st, dir: dir, clk: clock.Scaled(scale), model: model,
		modelTimeout: max(2*time.Minute, time.Duration(min(float64(10*time.Second)/scale, float64(1000*time.Hour))))}
	var rep report
	if rep.Naive, err = d.run(ctx, false); err != nil {
		return rep, fmt.Errorf("the naive run: %w", err)
	}
	if rep.Governed, err = d.run(ctx, true); err != nil {
		return rep, fmt.Errorf("the governed run: %w", err)
	}
	if spansFile != "" {
		if err := d.writeSpans(spansFile); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

type demo struct {
	tp           trace.TracerProvider
	spans        *store
	dir          string
	clk          clock.Clock
	model        string
	modelTimeout time.Duration
	serverSpans  []string // the MCP servers' span files
}

// run runs the agent loop against a fresh MCP server: naively (its
// requests traced, none governed), or under retrace.
func (d *demo) run(ctx context.Context, governed bool) (side, error) {
	srv := retracetest.New(retracetest.ToolAgent("search_docs", "search_cache", "payment API 429 incident"))
	if err := srv.Start(); err != nil {
		return side{}, err
	}
	defer srv.Close()
	opts := []middleware.Option{middleware.WithTracerProvider(d.tp), middleware.WithClock(d.clk)}

	// search_docs's own process, started by the MCP client.
	name := "naive"
	if governed {
		name = "governed"
	}
	self, err := os.Executable()
	if err != nil {
		return side{}, err
	}
	spansFile := filepath.Join(d.dir, name+"-server-spans.jsonl")
	d.serverSpans = append(d.serverSpans, spansFile)
	log := &requestLog{}
	cmd := exec.Command(self, "-serve", "-name", "docs", "-spans", spansFile)
	cmd.Stderr = log
	cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME=retrace-mcp-docs")

	// The tools' waits run on a virtual clock: the breaker's 60 s pass
	// only as the clients wait.
	toolClock := clock.NewVirtual(time.Now())
	rc := retracemcp.New(retracemcp.Config{Tool: tool.Config{Clock: toolClock}, Options: opts, TraceOnly: !governed})
	client := mcp.NewClient(&mcp.Implementation{Name: "oncall-agent", Version: "1.0.0"}, nil)
	client.AddSendingMiddleware(rc.Middleware())
	cs, err := client.Connect(ctx, rc.Transport(&mcp.CommandTransport{Command: cmd}), nil)
	if err != nil {
		return side{}, fmt.Errorf("starting the MCP server: %w: %s", err, log.text())
	}
	defer func() { _ = cs.Close() }()

	cache := &cache{}
	var tools runtime.Tools
	specs := []session.Tool{{Name: "search_docs", Description: "Search the runbooks."}, {Name: "search_cache", Description: "Yesterday's runbooks."}}
	tctx := ctx
	if governed {
		mcpTools, err := rc.Attach(cs).Tools(ctx)
		if err != nil {
			return side{}, err
		}
		box := tool.NewBox(append(mcpTools, tool.New("search_cache", cache.search, tool.Config{Description: "Yesterday's runbooks.", Clock: toolClock, Options: opts}))...)
		tools, specs = box, box.Specs()
		tctx = policies.WithTaskBudget(ctx, budget)
	} else {
		tools = naiveTools{cs: cs, cache: cache}
	}

	sess, err := session.New(session.Config{
		Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-demo-0000000000000000"}),
		Model:    d.model, Tools: specs, Options: opts, ModelTimeout: d.modelTimeout,
		System: "You are the on-call assistant. Use the tools to find the runbook.",
	})
	if err != nil {
		return side{}, err
	}
	before := d.spans.rootCount()
	loop := &runtime.Loop{Session: sess, Tools: tools, MaxSteps: maxSteps, Options: opts}
	res, runErr := loop.Run(tctx, "Why is the payment API answering 429, and what do we do?")
	// The server's process ends with the session: its log and spans are
	// whole once Close has returned.
	_ = cs.Close()

	root, ok := d.spans.rootAfter(before, "invoke_agent")
	if !ok {
		return side{}, errors.New("the run left no trace")
	}
	s := side{ServerRequests: log.calls("search_docs"), ModelRequests: srv.Requests(), CacheCalls: cache.n(),
		ModelTurns: res.Steps, ToolCalls: res.ToolCalls, TraceID: root.SpanContext().TraceID().String(), Outcome: "success"}
	if runErr == nil {
		s.Answer = res.Answer.Content
	}
	if governed {
		s.RetriesUsed = policies.TaskBudgetFrom(tctx).Used()
	}
	for _, kv := range root.Attributes() {
		switch kv.Key {
		case telemetry.Outcome:
			s.Outcome = kv.Value.AsString()
		case telemetry.Calls:
			s.Calls = kv.Value.AsInt64()
		case telemetry.CallsWorstCase:
			s.WorstCase = kv.Value.AsInt64()
		}
	}
	spans := d.spans.trace(root.SpanContext().TraceID())
	counts, err := retracetest.TraceCounts(spans)
	if err != nil {
		return s, err
	}
	s.LeafSpans = counts.LeafSpans
	s.ServerSpans, s.ServerParents, err = serverSpansOf(spansFile, root.SpanContext().TraceID(), spans)
	return s, err
}

// serverSpansOf counts the server's spans in the trace, and its SERVER
// spans whose parent is one of the client's spans.
func serverSpansOf(file string, id trace.TraceID, client []sdktrace.ReadOnlySpan) (n, parented int, err error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return 0, 0, err
	}
	rss, err := setup.ReadOTLPJSON(bytes.NewReader(raw))
	if err != nil {
		return 0, 0, err
	}
	ids := map[string]bool{}
	for _, s := range client {
		ids[s.SpanContext().SpanID().String()] = true
	}
	for _, rs := range rss {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				if hex.EncodeToString(s.TraceId) != id.String() {
					continue
				}
				n++
				if ids[hex.EncodeToString(s.ParentSpanId)] {
					parented++
				}
			}
		}
	}
	return n, parented, nil
}

// writeSpans writes both runs' spans, the client's and the servers', as
// OTLP JSON lines.
func (d *demo) writeSpans(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := setup.WriteOTLPJSON(f, d.spans.all()); err != nil {
		return err
	}
	for _, sf := range d.serverSpans {
		raw, err := os.ReadFile(sf)
		if err != nil {
			return err
		}
		if _, err := f.Write(raw); err != nil {
			return err
		}
	}
	return f.Close()
}

// naiveTools calls the tools as a loop without governance does: once, the
// error text handed to the model.
type naiveTools struct {
	cs    *mcp.ClientSession
	cache *cache
}

func (n naiveTools) Invoke(ctx context.Context, call session.ToolCall) session.Message {
	msg := session.Message{Role: session.ToolRole, ToolCallID: call.ID, Name: call.Name}
	if call.Name == "search_cache" {
		msg.Content, _ = n.cache.search(ctx, query{})
		return msg
	}
	var args map[string]any
	_ = json.Unmarshal([]byte(call.Arguments), &args)
	res, err := n.cs.CallTool(ctx, &mcp.CallToolParams{Name: call.Name, Arguments: args})
	switch {
	case err != nil:
		msg.Content = "error: " + err.Error()
	case res.IsError:
		msg.Content = "error: " + retracemcp.Text(res)
	default:
		msg.Content = retracemcp.Text(res)
	}
	return msg
}

type query struct {
	Query string `json:"query"`
}

// cache is the other tool: yesterday's runbook, always there.
type cache struct {
	mu    sync.Mutex
	calls int
}

func (c *cache) search(context.Context, query) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return "cached runbook (yesterday): the 429s come from the payment API's per-minute quota; back off and batch", nil
}

func (c *cache) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// requestLog reads the MCP server's stderr: one event a line.
type requestLog struct {
	mu     sync.Mutex
	buf    []byte
	events []mcptest.Event
	other  []string
}

func (l *requestLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		var ev mcptest.Event
		if json.Unmarshal(l.buf[:i], &ev) == nil && ev.Kind != "" {
			l.events = append(l.events, ev)
		} else {
			l.other = append(l.other, string(l.buf[:i]))
		}
		l.buf = l.buf[i+1:]
	}
}

func (l *requestLog) calls(tool string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ev := range l.events {
		if ev.Kind == "request" && ev.Method == "tools/call" && ev.Tool == tool {
			n++
		}
	}
	return n
}

func (l *requestLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.other, "\n")
}

// store keeps every span this process ended.
type store struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
	roots []sdktrace.ReadOnlySpan
}

func (s *store) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (s *store) OnEnd(span sdktrace.ReadOnlySpan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, span)
	if !span.Parent().IsValid() {
		s.roots = append(s.roots, span)
	}
}
func (s *store) Shutdown(context.Context) error   { return nil }
func (s *store) ForceFlush(context.Context) error { return nil }

func (s *store) rootCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.roots)
}

// rootAfter is the first root named name that ended after the first n.
func (s *store) rootAfter(n int, name string) (sdktrace.ReadOnlySpan, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.roots[min(n, len(s.roots)):] {
		if strings.HasPrefix(r.Name(), name) {
			return r, true
		}
	}
	return nil, false
}

func (s *store) trace(id trace.TraceID) []sdktrace.ReadOnlySpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.spans {
		if sp.SpanContext().TraceID() == id {
			out = append(out, sp)
		}
	}
	return out
}

func (s *store) all() []sdktrace.ReadOnlySpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sdktrace.ReadOnlySpan(nil), s.spans...)
}
