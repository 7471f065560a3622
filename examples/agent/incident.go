package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/tool"
)

// The incident: search_docs answered 429 thirty-one times in
// forty minutes while the agent kept calling it, until the step limit.
const (
	incidentOutage   = 30 * time.Minute // search_docs answers 429 this long
	incidentMaxSteps = 31
	incidentBudget   = 6 // retries per task, across all tools
)

// side is one run of the incident comparison.
type side struct {
	DownstreamCalls int    `json:"downstream_calls"` // requests search_docs received
	ModelTurns      int    `json:"model_turns"`
	ToolCalls       int    `json:"tool_calls"`
	RetriesUsed     int    `json:"retries_used"`
	Outcome         string `json:"outcome"`
	Answer          string `json:"answer,omitempty"`
	TraceID         string `json:"trace_id"`
}

// docsServer is search_docs' downstream: it answers 429 until the outage,
// measured on the demo's clock, is over.
type docsServer struct {
	srv   *httptest.Server
	clk   clock.Clock
	until time.Time
	calls atomic.Int64
}

func newDocsServer(clk clock.Clock) *docsServer {
	d := &docsServer{clk: clk, until: clk.Now().Add(incidentOutage)}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.calls.Add(1)
		if d.clk.Now().Before(d.until) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"type":"rate_limit_error","message":"Too Many Requests"}}`))
			return
		}
		_ = json.NewEncoder(w).Encode([]string{"runbook: " + r.URL.Query().Get("q")})
	}))
	return d
}

type searchArgs struct {
	Query string `json:"query"`
}

// search is the search_docs tool: one HTTP call, its errors as the server
// gave them.
func (d *docsServer) search(ctx context.Context, a searchArgs) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.srv.URL+"/search?q="+url.QueryEscape(a.Query), nil)
	if err != nil {
		return nil, err
	}
	resp, err := d.srv.Client().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return nil, policies.ErrorFrom(resp)
	}
	var out json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// cache is the other tool's store: yesterday's runbook, always there.
type cache struct{ calls atomic.Int64 }

func (c *cache) search(_ context.Context, a searchArgs) (string, error) {
	c.calls.Add(1)
	return "cached runbook (yesterday): the 429s come from the payment API's per-minute quota; back off and batch", nil
}

// naiveTools runs the tools as a loop without governance does: once, with
// the error text handed to the model.
type naiveTools map[string]func(ctx context.Context, args string) (string, error)

func (n naiveTools) Invoke(ctx context.Context, call session.ToolCall) session.Message {
	out, err := n[call.Name](ctx, call.Arguments)
	if err != nil {
		out = "error: " + err.Error()
	}
	return session.Message{Role: session.ToolRole, ToolCallID: call.ID, Name: call.Name, Content: out}
}

func bare[A, R any](fn func(context.Context, A) (R, error)) func(context.Context, string) (string, error) {
	return func(ctx context.Context, raw string) (string, error) {
		var a A
		if err := json.Unmarshal([]byte(raw), &a); err != nil {
			return "", err
		}
		r, err := fn(ctx, a)
		if err != nil {
			return "", err
		}
		b, err := json.Marshal(r)
		return string(b), err
	}
}

// incident runs the loop twice against the same outage: naive, then
// governed, and reports both.
func (d *demo) incident(ctx context.Context) (result, error) {
	srv := retracetest.New(retracetest.ToolAgent("search_docs", "search_cache", "payment API 429 incident"))
	if err := srv.Start(); err != nil {
		return result{}, err
	}
	defer srv.Close()
	opts := d.middlewareOptions()

	loop := func(tools runtime.Tools, specs []session.Tool, ctx context.Context) (runtime.LoopResult, error) {
		sess, err := session.New(session.Config{
			Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-demo-0000000000000000"}),
			Model:    d.opts.model, Tools: specs, Options: opts, ModelTimeout: d.modelTimeout(),
			System: "You are the on-call assistant. Use the tools to find the runbook.",
		})
		if err != nil {
			return runtime.LoopResult{}, err
		}
		l := &runtime.Loop{Session: sess, Tools: tools, MaxSteps: incidentMaxSteps, Options: opts}
		return l.Run(ctx, "Why is the payment API answering 429, and what do we do?")
	}

	// The outage and the tools' waits run on a virtual clock: 30 minutes of
	// 429 pass only as the clients wait, never because the machine is slow.
	naiveClock, governedClock := clock.NewVirtual(time.Now()), clock.NewVirtual(time.Now())

	// Without governance.
	docs := newDocsServer(naiveClock)
	defer docs.srv.Close()
	specs := []session.Tool{{Name: "search_docs", Description: "Search the runbooks."}, {Name: "search_cache", Description: "Yesterday's runbooks."}}
	res, err := loop(naiveTools{"search_docs": bare(docs.search), "search_cache": bare((&cache{}).search)}, specs, ctx)
	naive := d.runOf(res, err, int(docs.calls.Load()), 0)
	naiveModelCalls := srv.Requests()

	// With retrace: the same outage, a fresh downstream.
	docs2 := newDocsServer(governedClock)
	defer docs2.srv.Close()
	cached := &cache{}
	box := tool.NewBox(
		tool.New("search_docs", docs2.search, tool.Config{Description: "Search the runbooks.", Clock: governedClock, Options: opts}),
		tool.New("search_cache", cached.search, tool.Config{Description: "Yesterday's runbooks.", Clock: governedClock, Options: opts}),
	)
	tctx := policies.WithTaskBudget(ctx, incidentBudget)
	start := time.Now()
	res, err = loop(box, box.Specs(), tctx)
	governed := d.runOf(res, err, int(docs2.calls.Load()), policies.TaskBudgetFrom(tctx).Used())

	out, ferr := d.fromTrace("incident", governed.TraceID, time.Since(start))
	if ferr != nil {
		return out, ferr
	}
	// What the governed run's downstreams received: the model's requests and
	// both tools' calls. Each is a leaf of its trace.
	out.ProviderRequests = srv.Requests() - naiveModelCalls + int(docs2.calls.Load()) + int(cached.calls.Load())
	out.Details = map[string]any{"naive": naive, "governed": governed}
	out.Problems = checkIncident(out, naive, governed)
	return out, nil
}

func (d *demo) runOf(res runtime.LoopResult, err error, downstream, retries int) side {
	r := side{DownstreamCalls: downstream, ModelTurns: res.Steps, ToolCalls: res.ToolCalls, RetriesUsed: retries, Outcome: "success"}
	if root, ok := d.spans.lastRoot(); ok {
		r.TraceID = root.SpanContext().TraceID().String()
		r.Outcome = attrOf(root, "retrace.outcome").AsString()
	}
	if err == nil {
		r.Answer = res.Answer.Content
	}
	return r
}

func checkIncident(r result, naive, governed side) []string {
	p := checkCounts(r)
	if naive.DownstreamCalls != incidentMaxSteps || naive.Outcome != "step_limit" {
		p = append(p, fmt.Sprintf("want the naive loop to call search_docs %d times until the step limit, got %d (%s)", incidentMaxSteps, naive.DownstreamCalls, naive.Outcome))
	}
	if governed.DownstreamCalls > 5 {
		p = append(p, fmt.Sprintf("want at most 5 calls to search_docs before the breaker opens, got %d", governed.DownstreamCalls))
	}
	if governed.RetriesUsed > incidentBudget {
		p = append(p, fmt.Sprintf("want at most %d retries, got %d", incidentBudget, governed.RetriesUsed))
	}
	if governed.Outcome != "success" || !strings.HasPrefix(governed.Answer, "From search_cache") {
		p = append(p, "want the governed loop to answer from the other tool")
	}
	return p
}
