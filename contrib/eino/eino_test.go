package retraceeino_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino-ext/components/model/openai"
	"github.com/cloudwego/eino/adk"
	einotool "github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/tool"

	retraceeino "github.com/retrace-go/retrace/contrib/eino"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// rig is one agent under test: the fault server as its model, a real eino
// ChatModelAgent on eino-ext's OpenAI model, every span recorded.
type rig struct {
	srv   *retracetest.Server
	rec   *tracetest.SpanRecorder
	clk   *clock.Fake
	docs  *docsServer
	cache atomic.Int64
	mw    *retraceeino.Middleware
	tp    *sdktrace.TracerProvider
}

type agentOptions struct {
	modelRetry *adk.ModelRetryConfig
	streaming  bool
}

func newRig(t *testing.T, script retracetest.Script) *rig {
	t.Helper()
	r := &rig{srv: retracetest.New(script), rec: tracetest.NewSpanRecorder(), clk: clock.NewVirtual(epoch)}
	require.NoError(t, r.srv.Start())
	t.Cleanup(r.srv.Close)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	r.tp = tp
	r.docs = newDocsServer(r.clk)
	t.Cleanup(r.docs.srv.Close)
	r.mw = retraceeino.New(retraceeino.Config{
		Model: "gpt-test", Provider: "openai", Clock: r.clk,
		Options: []middleware.Option{middleware.WithTracerProvider(tp)},
	})
	return r
}

// run runs the agent on one question and returns its events.
func (r *rig) run(t *testing.T, ctx context.Context, o agentOptions) []*adk.AgentEvent {
	t.Helper()
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tp := middleware.WithTracerProvider(r.tp)
	chat, err := openai.NewChatModel(ctx, &openai.ChatModelConfig{
		BaseURL: r.srv.URL(), APIKey: "sk-test-0000000000000000", Model: "gpt-test",
		HTTPClient: &http.Client{Transport: middleware.Transport(base, "http", tp)},
	})
	require.NoError(t, err)
	docs, err := utils.InferTool("search_docs", "Search the runbooks.", r.docs.search)
	require.NoError(t, err)
	cache, err := utils.InferTool("search_cache", "Yesterday's runbooks.", func(context.Context, searchArgs) (string, error) {
		r.cache.Add(1)
		return "cached runbook (yesterday): back off and batch", nil
	})
	require.NoError(t, err)
	agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
		Name: "oncall", Description: "the on-call assistant", Instruction: "Use the tools to find the runbook.",
		Model:            chat,
		ToolsConfig:      adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []einotool.BaseTool{docs, cache}}},
		Handlers:         []adk.ChatModelAgentMiddleware{r.mw},
		ModelRetryConfig: o.modelRetry,
	})
	require.NoError(t, err)
	runner := adk.NewRunner(ctx, adk.RunnerConfig{Agent: r.mw.Agent(agent), EnableStreaming: o.streaming})
	var events []*adk.AgentEvent
	for it := runner.Query(ctx, "Why is the payment API answering 429?"); ; {
		ev, ok := it.Next()
		if !ok {
			return events
		}
		events = append(events, ev)
	}
}

// root is the run's one root span: the agent layer.
func (r *rig) root(t *testing.T) sdktrace.ReadOnlySpan {
	t.Helper()
	var roots []sdktrace.ReadOnlySpan
	for _, s := range r.rec.Ended() {
		if !s.Parent().IsValid() {
			roots = append(roots, s)
		}
	}
	require.Len(t, roots, 1, "one run, one trace")
	assert.Equal(t, "invoke_agent", roots[0].Name())
	return roots[0]
}

func lastErr(events []*adk.AgentEvent) error {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Err != nil {
			return events[i].Err
		}
	}
	return nil
}

// A provider outage: the session layer makes its 4 attempts and the run
// fails; every provider request is one leaf span, and the root counts them.
func TestProviderOutage(t *testing.T) {
	r := newRig(t, retracetest.Always(retracetest.ServerError(503)))
	events := r.run(t, context.Background(), agentOptions{})

	err := lastErr(events)
	require.Error(t, err)
	var fe *policies.FailedError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, policies.OutcomeFailedExhausted, fe.Outcome)
	assert.Equal(t, 4, fe.Attempts)

	root := r.root(t)
	assert.Equal(t, 4, r.srv.Requests())
	assert.Equal(t, 4, leafSpans(r.rec.Ended()))
	assert.EqualValues(t, 4, num(root, telemetry.Calls))
	assert.EqualValues(t, 20*4, num(root, telemetry.CallsWorstCase), "20 steps × session(4)")
	assert.Empty(t, nestedEvents(root), "one retrying layer: nothing nested")
	assert.Equal(t, policies.Transient, fe.Class, "go-openai's APIError, classified by its status")
	assert.Contains(t, fe.Err.Error(), "status code: 503")
}

// eino's ModelRetryConfig runs outside every WrapModel wrapper: each of its
// attempts runs the whole session layer again. The trace says so before the
// calls happen, and counts them all.
func TestModelRetryConfigMultipliesTheSession(t *testing.T) {
	r := newRig(t, retracetest.Always(retracetest.ServerError(503)))
	events := r.run(t, context.Background(), agentOptions{modelRetry: &adk.ModelRetryConfig{
		MaxRetries:  2,
		BackoffFunc: func(context.Context, int) time.Duration { return 0 },
	}})

	err := lastErr(events)
	require.Error(t, err)
	var exhausted *adk.RetryExhaustedError
	require.ErrorAs(t, err, &exhausted, "eino gave up after its own retries")
	var fe *policies.FailedError
	require.ErrorAs(t, exhausted.LastErr, &fe, "each of them ran retrace's session layer to its end")

	root := r.root(t)
	assert.Equal(t, 12, r.srv.Requests(), "eino.ModelRetry(3) × session(4)")
	assert.Equal(t, 12, leafSpans(r.rec.Ended()))
	assert.EqualValues(t, 12, num(root, telemetry.Calls))
	assert.EqualValues(t, 20*12, num(root, telemetry.CallsWorstCase))
	assert.Equal(t, []string{"eino.ModelRetry(3) × session(4)"}, nestedEvents(root))
	sessions := layerSpans(r.rec.Ended(), "session")
	require.Len(t, sessions, 3)
	for _, s := range sessions {
		assert.EqualValues(t, 1, num(s, telemetry.RetryDepth), "inside eino's retry")
		assert.Equal(t, string(policies.OutcomeFailedExhausted), str(s, telemetry.Outcome))
	}
}

// eino's default retry retries every error, a permanent one too: a rejected
// key that retrace calls once is called once per eino attempt.
func TestModelRetryConfigRetriesPermanentErrors(t *testing.T) {
	r := newRig(t, retracetest.Always(retracetest.InvalidAPIKey()))
	events := r.run(t, context.Background(), agentOptions{modelRetry: &adk.ModelRetryConfig{
		MaxRetries:  2,
		BackoffFunc: func(context.Context, int) time.Duration { return 0 },
	}})
	require.Error(t, lastErr(events))
	root := r.root(t)
	assert.Equal(t, 3, r.srv.Requests(), "retrace stops after one; eino calls it twice more")
	assert.Equal(t, 3, leafSpans(r.rec.Ended()))
	assert.EqualValues(t, 3, num(root, telemetry.Calls))
	for _, s := range layerSpans(r.rec.Ended(), "session") {
		assert.Equal(t, string(policies.OutcomeFailedPermanent), str(s, telemetry.Outcome))
	}
}

// A tool whose downstream answers 429 for 30 minutes: the tool's breaker
// opens after 5 calls, the model reads retrace's failure text in the tool
// message, and answers from the other tool.
func TestToolOutageOpensTheBreaker(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(map[bool]string{false: "generate", true: "stream"}[streaming], func(t *testing.T) {
			var mu sync.Mutex
			var failures []tool.Failure // what the model read, in order
			r := newRig(t, func(n int, req retracetest.Request) retracetest.Fault {
				f, fault := incidentModel(req)
				if f != nil {
					mu.Lock()
					failures = append(failures, *f)
					mu.Unlock()
				}
				return fault
			})
			ctx := policies.WithTaskBudget(context.Background(), 6)
			events := r.run(t, ctx, agentOptions{streaming: streaming})
			require.NoError(t, lastErr(events))
			mu.Lock()
			defer mu.Unlock()

			assert.EqualValues(t, 5, r.docs.calls.Load(), "the breaker opens after 5 consecutive failures")
			assert.EqualValues(t, 1, r.cache.Load())
			require.NotEmpty(t, failures)
			last := failures[len(failures)-1]
			assert.Equal(t, "transient", last.Class)
			assert.Contains(t, last.Hint, "search_docs is unavailable, circuit open for another 60 s")
			assert.Equal(t, "search_docs failed 3 times (rate_limit_error): try again later, or use another tool", failures[0].Hint)
			assert.Contains(t, failures[0].Message, "Too Many Requests")

			root := r.root(t)
			requests := r.srv.Requests() + int(r.docs.calls.Load()) + int(r.cache.Load())
			assert.Equal(t, requests, leafSpans(r.rec.Ended()))
			assert.EqualValues(t, requests, num(root, telemetry.Calls))
			assert.GreaterOrEqual(t, num(root, telemetry.CallsWorstCase), num(root, telemetry.Calls))
			var outcomes []string
			for _, s := range layerSpans(r.rec.Ended(), "tool") {
				if str(s, telemetry.GenAIToolName) == "search_docs" {
					outcomes = append(outcomes, str(s, telemetry.Outcome))
					if str(s, telemetry.Outcome) == "rejected" {
						assert.Contains(t, str(s, telemetry.Diagnosis), "circuit breaker open (retry in 1m0s)")
					}
				}
			}
			assert.Equal(t, []string{"failed_exhausted", "rejected"}, outcomes, "3 calls, then 2 and the circuit opens")
			assert.Equal(t, "From search_cache: cached runbook (yesterday): back off and batch", answer(t, events))
		})
	}
}

// An interrupt that a tool raises is eino's, not a failure: it reaches eino
// as it is, is not retried, and the breaker does not count it.
func TestToolInterruptPassesThrough(t *testing.T) {
	r := newRig(t, retracetest.Always(retracetest.OK()))
	var calls atomic.Int64
	wrapped, err := r.mw.WrapInvokableToolCall(context.Background(), func(ctx context.Context, _ string, _ ...einotool.Option) (string, error) {
		calls.Add(1)
		return "", compose.Interrupt(ctx, "need approval")
	}, &adk.ToolContext{Name: "approve"})
	require.NoError(t, err)
	_, err = wrapped(context.Background(), `{}`)
	require.Error(t, err)
	_, isInterrupt := compose.IsInterruptRerunError(err)
	assert.True(t, isInterrupt, "got %v", err)
	assert.EqualValues(t, 1, calls.Load())
}

// docsServer is search_docs' downstream: it answers 429 until the outage,
// measured on the test's clock, is over.
type docsServer struct {
	srv   *httptest.Server
	clk   clock.Clock
	until time.Time
	calls atomic.Int64
}

func newDocsServer(clk clock.Clock) *docsServer {
	d := &docsServer{clk: clk, until: clk.Now().Add(30 * time.Minute)}
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

func (d *docsServer) search(ctx context.Context, a searchArgs) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.srv.URL+"/search?q="+url.QueryEscape(a.Query), nil)
	if err != nil {
		return "", err
	}
	resp, err := d.srv.Client().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return "", middleware.APIErrorFrom(resp)
	}
	var out []string
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	return strings.Join(out, "; "), nil
}

// incidentModel plays the LLM: it searches the docs, reads the tool
// message, goes to the other tool when told the first is unavailable, and
// answers once it has a result. It returns the failure it read, if any.
func incidentModel(req retracetest.Request) (*tool.Failure, retracetest.Fault) {
	last := req.Messages[len(req.Messages)-1]
	call := func(name string) retracetest.Fault {
		return retracetest.CallTools(retracetest.ToolCall{Name: name, Arguments: `{"query":"payment API 429"}`})
	}
	if last.Role != "tool" {
		return nil, call("search_docs")
	}
	var res struct {
		Error *tool.Failure `json:"error"`
	}
	if json.Unmarshal([]byte(last.Content), &res) == nil && res.Error != nil {
		if strings.Contains(res.Error.Hint, "unavailable") {
			return res.Error, call("search_cache")
		}
		return res.Error, call("search_docs")
	}
	name := "a tool"
	for _, m := range req.Messages {
		for _, c := range m.ToolCalls {
			if c.ID == last.ToolCallID {
				name = c.Name
			}
		}
	}
	return nil, retracetest.Reply("From " + name + ": " + last.Content)
}

// answer is the text of the run's last model message.
func answer(t *testing.T, events []*adk.AgentEvent) string {
	t.Helper()
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		if ev.Output == nil || ev.Output.MessageOutput == nil {
			continue
		}
		msg, err := ev.Output.MessageOutput.GetMessage()
		require.NoError(t, err)
		if msg.Role == "assistant" {
			return msg.Content
		}
	}
	return ""
}

// leafSpans counts the retrace spans beneath which no other retrace span
// started: each is one call that reached a downstream.
func leafSpans(spans []sdktrace.ReadOnlySpan) int {
	parents := map[trace.SpanID]bool{}
	for _, s := range spans {
		if isRetrace(s) && s.Parent().IsValid() {
			parents[s.Parent().SpanID()] = true
		}
	}
	n := 0
	for _, s := range spans {
		if _, policy := lookup(s, telemetry.Policy); isRetrace(s) && !policy && !parents[s.SpanContext().SpanID()] {
			n++
		}
	}
	return n
}

func isRetrace(s sdktrace.ReadOnlySpan) bool {
	_, layer := lookup(s, telemetry.Layer)
	_, attempt := lookup(s, telemetry.Attempt)
	return layer || attempt
}

func layerSpans(spans []sdktrace.ReadOnlySpan, layer string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		_, attempt := lookup(s, telemetry.Attempt)
		_, policy := lookup(s, telemetry.Policy)
		if str(s, telemetry.Layer) == layer && !attempt && !policy {
			out = append(out, s)
		}
	}
	return out
}

func nestedEvents(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		if e.Name != telemetry.EventNestedRetry {
			continue
		}
		for _, kv := range e.Attributes {
			if kv.Key == telemetry.NestedLayers {
				out = append(out, kv.Value.AsString())
			}
		}
	}
	return out
}

func lookup(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func str(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	v, _ := lookup(s, k)
	return v.AsString()
}

func num(s sdktrace.ReadOnlySpan, k attribute.Key) int64 {
	v, _ := lookup(s, k)
	return v.AsInt64()
}
