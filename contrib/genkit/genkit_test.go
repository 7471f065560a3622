package retracegenkit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/core/api"
	"github.com/firebase/genkit/go/genkit"
	"github.com/firebase/genkit/go/plugins/compat_oai"
	gkmw "github.com/firebase/genkit/go/plugins/middleware"
	"github.com/openai/openai-go/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/clock"
	retracegenkit "github.com/retrace-go/retrace/contrib/genkit"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/tool"
)

// Nothing is ignored: genkit.Init's one lasting goroutine (the
// signal.NotifyContext watcher) ends with the context Init is given, which
// each test cancels; its dev-mode reflection server (GENKIT_ENV=dev) is not
// started; its tools run in goroutines that Generate joins.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stack is a genkit agent on the fault server, traced into a recorder.
type stack struct {
	srv  *retracetest.Server
	rec  *tracetest.SpanRecorder
	g    *genkit.Genkit
	opts []middleware.Option
	clk  clock.Clock
}

// newStack starts the fault server with script and a genkit instance whose
// OpenAI-compatible model ("fault/gpt-test") is the real compat_oai plugin on
// openai-go, with the SDK's own retries set to sdkRetries and each HTTP
// request a span (middleware.SDK).
func newStack(t *testing.T, script retracetest.Script, sdkRetries int) *stack {
	t.Helper()
	return newStackWith(t, script, stackConfig{sdkRetries: sdkRetries})
}

// stackConfig is how a stack's genkit instance is made.
type stackConfig struct {
	sdkRetries int
	noSDK      bool         // leave middleware.SDK out of the client: the model call is the leaf
	plugins    []api.Plugin // more plugins for genkit.Init (retracegenkit.Plugin)
}

func newStackWith(t *testing.T, script retracetest.Script, sc stackConfig) *stack {
	t.Helper()
	srv := retracetest.New(script)
	require.NoError(t, srv.Start())
	t.Cleanup(srv.Close)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	// Genkit traces through the global provider (it installs an SDK
	// provider of its own when the global one is not): with the test's
	// there, genkit's spans and retrace's are one trace, as in Jaeger.
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	clk := clock.NewVirtual(time.Unix(1_700_000_000, 0)) // backoffs and cool-downs pass at once
	opts := []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(clk)}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	reqOpts := []option.RequestOption{option.WithHTTPClient(&http.Client{Transport: tr}), option.WithMaxRetries(sc.sdkRetries)}
	if !sc.noSDK {
		reqOpts = append(reqOpts, option.WithMiddleware(middleware.SDK("openai-go", sc.sdkRetries, opts...)))
	}
	plugin := &compat_oai.OpenAICompatible{
		Provider: "fault", BaseURL: srv.URL(), APIKey: "sk-test-0000000000000000", Opts: reqOpts,
	}
	// genkit.Init watches for SIGINT and SIGTERM until its context ends
	// (signal.NotifyContext, whose stop it drops): the test ends it.
	initCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	g := genkit.Init(initCtx, genkit.WithPlugins(append([]api.Plugin{plugin}, sc.plugins...)...))
	return &stack{srv: srv, rec: rec, g: g, opts: opts, clk: clk}
}

// generate runs one Generate call with the given middleware and tools.
func (s *stack) generate(ctx context.Context, use []ai.Middleware, tools ...ai.ToolRef) (*ai.ModelResponse, error) {
	return genkit.Generate(ctx, s.g,
		ai.WithModelName("fault/gpt-test"),
		ai.WithPrompt("Why is the payment API answering 429?"),
		ai.WithTools(tools...),
		ai.WithUse(use...),
	)
}

// trace is what the recorder holds: the root, the leaf spans, and counts.
type trace struct {
	spans []sdktrace.ReadOnlySpan
	root  sdktrace.ReadOnlySpan
}

func (s *stack) trace(t *testing.T) trace {
	t.Helper()
	spans := s.rec.Ended()
	tr := trace{spans: spans}
	for _, sp := range spans {
		if sp.Name() == "invoke_agent" {
			require.Nil(t, tr.root, "one agent layer per Generate")
			tr.root = sp
		}
	}
	require.NotNil(t, tr.root, "the agent layer span")
	return tr
}

// leaves counts retrace's leaf spans, by kind: its spans beneath which no
// other span of retrace's started. Genkit's own spans (its generate, model
// and tool actions) stand between retrace's, so the walk goes through them.
func (tr trace) leaves() (http, other int) {
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range tr.spans {
		byID[sp.SpanContext().SpanID().String()] = sp
	}
	hasRetraceBelow := map[string]bool{}
	for _, sp := range tr.spans {
		if !ours(sp) {
			continue
		}
		for p := byID[sp.Parent().SpanID().String()]; p != nil; p = byID[p.Parent().SpanID().String()] {
			hasRetraceBelow[p.SpanContext().SpanID().String()] = true
		}
	}
	for _, sp := range tr.spans {
		if !ours(sp) || hasRetraceBelow[sp.SpanContext().SpanID().String()] {
			continue
		}
		if sp.SpanKind() == oteltrace.SpanKindClient {
			http++
		} else {
			other++
		}
	}
	return http, other
}

func ours(sp sdktrace.ReadOnlySpan) bool {
	return sp.InstrumentationScope().Name == "github.com/retrace-go/retrace"
}

func attr(sp sdktrace.ReadOnlySpan, key string) (string, bool) {
	for _, kv := range sp.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String(), true
		}
	}
	return "", false
}

// checkCounts asserts provider requests = leaf HTTP spans, and retrace.calls
// = all leaf spans.
func checkCounts(t *testing.T, s *stack, tr trace, wantRequests int) {
	t.Helper()
	httpLeaves, others := tr.leaves()
	assert.Equal(t, wantRequests, s.srv.Requests(), "provider requests")
	assert.Equal(t, s.srv.Requests(), httpLeaves, "leaf HTTP spans = provider requests")
	calls, _ := attr(tr.root, string(telemetry.Calls))
	assert.Equal(t, itoa(httpLeaves+others), calls, "retrace.calls = leaf spans")
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestProviderOutage(t *testing.T) {
	s := newStack(t, retracetest.Always(retracetest.ServerError(503)), 0)
	rt := retracegenkit.New(retracegenkit.Config{Options: s.opts})
	_, err := s.generate(context.Background(), []ai.Middleware{rt})
	require.Error(t, err)
	var fe *policies.Error
	require.True(t, errors.As(err, &fe), "the session layer's final error: %v", err)
	assert.Equal(t, telemetry.OutcomeFailedExhausted, fe.Outcome)
	assert.Equal(t, 4, fe.Attempts)

	tr := s.trace(t)
	checkCounts(t, s, tr, 4)
	worst, _ := attr(tr.root, string(telemetry.CallsWorstCase))
	assert.Equal(t, "24", worst, "6 model calls (5 turns) × session(4)")
	assert.Empty(t, retracetest.NestedChains(tr.root), "one retrying layer: nothing nested")
}

// genkit's Retry listed after retrace runs inside retrace's model hook: each
// of the session's attempts is up to MaxRetries+1 provider calls.
func TestGenkitRetryInside(t *testing.T) {
	s := newStack(t, retracetest.Always(retracetest.ServerError(503)), 0)
	rt := retracegenkit.New(retracegenkit.Config{Options: s.opts})
	retry := &gkmw.Retry{MaxRetries: 2, InitialDelayMs: 1, MaxDelayMs: 1, NoJitter: true}
	_, err := s.generate(context.Background(), []ai.Middleware{rt, retry})
	require.Error(t, err)

	tr := s.trace(t)
	checkCounts(t, s, tr, 12)
	assert.Equal(t, []string{"session(4) × genkit.Retry(3)"}, retracetest.NestedChains(tr.root))
	worst, _ := attr(tr.root, string(telemetry.CallsWorstCase))
	assert.Equal(t, "72", worst, "6 model calls × session(4) × genkit.Retry(3)")
}

// genkit's Retry listed before retrace runs around retrace's model hook: each
// of its attempts is a session layer call.
func TestGenkitRetryOutside(t *testing.T) {
	s := newStack(t, retracetest.Always(retracetest.ServerError(503)), 0)
	rt := retracegenkit.New(retracegenkit.Config{Options: s.opts})
	retry := &gkmw.Retry{MaxRetries: 2, InitialDelayMs: 1, MaxDelayMs: 1, NoJitter: true}
	_, err := s.generate(context.Background(), []ai.Middleware{retry, rt})
	require.Error(t, err)

	tr := s.trace(t)
	checkCounts(t, s, tr, 12)
	assert.Equal(t, []string{"genkit.Retry(3) × session(4)"}, retracetest.NestedChains(tr.root))
	worst, _ := attr(tr.root, string(telemetry.CallsWorstCase))
	assert.Equal(t, "72", worst, "6 model calls × genkit.Retry(3) × session(4)")
	sessions := 0
	for _, sp := range tr.spans {
		if layer, _ := attr(sp, string(telemetry.Layer)); layer == "session" {
			sessions++
			depth, _ := attr(sp, string(telemetry.RetryDepth))
			assert.Equal(t, "1", depth, "genkit's Retry encloses each session call")
		}
	}
	assert.Equal(t, 3, sessions, "one session layer call per genkit.Retry attempt")
}

// openai-go's own retries (compat_oai leaves them at the SDK's default, 2)
// run inside the model call: each of the session's attempts is 3 requests.
// The provider is rate limited with retry-after-ms 1, which openai-go honours
// instead of its own backoff of half a second and more, in real time.
func TestSDKRetriesOfCompatOAI(t *testing.T) {
	limited := retracetest.RateLimited(time.Millisecond)
	limited.Header = http.Header{"Retry-After-Ms": {"1"}}
	s := newStack(t, retracetest.Always(limited), 2)
	rt := retracegenkit.New(retracegenkit.Config{Options: s.opts})
	_, err := s.generate(context.Background(), []ai.Middleware{rt})
	require.Error(t, err)

	tr := s.trace(t)
	checkCounts(t, s, tr, 12)
	assert.Equal(t, []string{"session(4) × openai-go(3)"}, retracetest.NestedChains(tr.root))
	worst, _ := attr(tr.root, string(telemetry.CallsWorstCase))
	assert.Equal(t, "72", worst, "6 model calls × session(4) × openai-go(3)")
}

type searchArgs struct {
	Query string `json:"query"`
}

// model plays the LLM: it searches the docs, goes to the cache when told the
// docs are unavailable, and answers once a tool gave it something.
func model(n int, req retracetest.Request) retracetest.Fault {
	last := req.Messages[len(req.Messages)-1]
	call := func(name string) retracetest.Fault {
		return retracetest.CallTools(retracetest.ToolCall{Name: name, Arguments: `{"query":"payment 429"}`})
	}
	if last.Role != "tool" {
		return call("search_docs")
	}
	var res struct {
		Error *tool.Failure `json:"error"`
	}
	if json.Unmarshal([]byte(last.Content), &res) == nil && res.Error != nil {
		if strings.Contains(res.Error.Hint, "unavailable") {
			return call("search_cache")
		}
		return call("search_docs")
	}
	return retracetest.Reply("From the tools: " + last.Content)
}

// A tool that answers 429 for a while: the tool layer retries it, its breaker
// opens after 5 failures, and the model, told so, uses the other tool.
func TestToolOutageOpensTheBreaker(t *testing.T) {
	s := newStack(t, model, 0)
	var docsCalls, cacheCalls atomic.Int64
	docs := genkit.DefineTool(s.g, "search_docs", "Search the runbooks.",
		func(tc *ai.ToolContext, in searchArgs) (string, error) {
			if docsCalls.Add(1) <= 30 {
				return "", &policies.Error{StatusCode: 429, Code: "rate_limit_error", Message: "Too Many Requests"}
			}
			return "runbook", nil
		})
	cache := genkit.DefineTool(s.g, "search_cache", "Yesterday's runbooks.",
		func(tc *ai.ToolContext, in searchArgs) (string, error) {
			cacheCalls.Add(1)
			return "cached runbook: back off and batch", nil
		})
	rt := retracegenkit.New(retracegenkit.Config{Options: s.opts, Tool: tool.Config{Clock: s.clk}})
	resp, err := s.generate(context.Background(), []ai.Middleware{rt}, docs, cache)
	require.NoError(t, err)
	assert.Contains(t, resp.Text(), "cached runbook")
	assert.Equal(t, int64(5), docsCalls.Load(), "3 attempts, then 2 until the breaker opened")
	assert.Equal(t, int64(1), cacheCalls.Load())

	// The model read retrace's final failure, not the tool's intermediate errors.
	reqs := s.srv.Received()
	require.Len(t, reqs, 4, "search_docs, search_docs again, search_cache, the answer")
	var hints []string
	for _, r := range reqs[1:3] {
		last := r.Messages[len(r.Messages)-1]
		require.Equal(t, "tool", last.Role)
		var res struct {
			Error *tool.Failure `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(last.Content), &res), last.Content)
		require.NotNil(t, res.Error, last.Content)
		hints = append(hints, res.Error.Hint)
	}
	assert.Contains(t, hints[0], "search_docs failed 3 times")
	assert.Contains(t, hints[1], "search_docs is unavailable, circuit open for another 60 s")

	tr := s.trace(t)
	checkCounts(t, s, tr, 4)
	var outcomes []string
	for _, sp := range tr.spans {
		if sp.Name() == "execute_tool search_docs" {
			o, _ := attr(sp, string(telemetry.Outcome))
			outcomes = append(outcomes, o)
		}
	}
	assert.Equal(t, []string{string(telemetry.OutcomeFailedExhausted), string(telemetry.OutcomeRejected)}, outcomes)
	httpLeaves, others := tr.leaves()
	assert.Equal(t, 4, httpLeaves)
	assert.Equal(t, 6, others, "5 search_docs attempts and 1 search_cache call")
}
