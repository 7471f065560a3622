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
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
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
	// plainHTTP leaves middleware.Transport out of the model's HTTP client:
	// the model attempts are the leaf spans, and the adapter alone judges
	// a stream's end.
	plainHTTP bool
	// tools replace the agent's tools (search_docs and search_cache).
	tools []einotool.BaseTool
}

func newRig(t *testing.T, script retracetest.Script, configure ...func(*retraceeino.Config)) *rig {
	t.Helper()
	r := &rig{srv: retracetest.New(script), rec: tracetest.NewSpanRecorder(), clk: clock.NewVirtual(epoch)}
	require.NoError(t, r.srv.Start())
	t.Cleanup(r.srv.Close)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	r.tp = tp
	r.docs = newDocsServer(r.clk)
	t.Cleanup(r.docs.srv.Close)
	cfg := retraceeino.Config{
		Model: "gpt-test", Provider: "openai", Clock: r.clk,
		Options: []middleware.Option{middleware.WithTracerProvider(tp)},
	}
	for _, c := range configure {
		c(&cfg)
	}
	r.mw = retraceeino.New(cfg)
	return r
}

// run runs the agent on one question and returns its events.
func (r *rig) run(t *testing.T, ctx context.Context, o agentOptions) []*adk.AgentEvent {
	t.Helper()
	return query(ctx, r.runner(t, ctx, o))
}

// runner is the agent under test, run through the middleware's agent layer.
func (r *rig) runner(t *testing.T, ctx context.Context, o agentOptions) *adk.Runner {
	t.Helper()
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	hc := &http.Client{Transport: base}
	if !o.plainHTTP {
		hc.Transport = middleware.Transport(base, "http", middleware.WithTracerProvider(r.tp))
	}
	chat, err := openai.NewChatModel(ctx, &openai.ChatModelConfig{
		BaseURL: r.srv.URL(), APIKey: "sk-test-0000000000000000", Model: "gpt-test", HTTPClient: hc,
	})
	require.NoError(t, err)
	tools := o.tools
	if tools == nil {
		tools = []einotool.BaseTool{r.docsTool(t), r.cacheTool(t)}
	}
	agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
		Name: "oncall", Description: "the on-call assistant", Instruction: "Use the tools to find the runbook.",
		Model:            chat,
		ToolsConfig:      adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: tools}},
		Handlers:         []adk.ChatModelAgentMiddleware{r.mw},
		ModelRetryConfig: o.modelRetry,
	})
	require.NoError(t, err)
	return adk.NewRunner(ctx, adk.RunnerConfig{Agent: r.mw.Agent(agent), EnableStreaming: o.streaming})
}

// query runs the runner on one question and returns its events.
func query(ctx context.Context, runner *adk.Runner) []*adk.AgentEvent {
	var events []*adk.AgentEvent
	for it := runner.Query(ctx, "Why is the payment API answering 429?"); ; {
		ev, ok := it.Next()
		if !ok {
			return events
		}
		events = append(events, ev)
	}
}

// docsTool is search_docs, on the docs server.
func (r *rig) docsTool(t *testing.T) einotool.InvokableTool {
	t.Helper()
	docs, err := utils.InferTool("search_docs", "Search the runbooks.", r.docs.search)
	require.NoError(t, err)
	return docs
}

// cacheTool is search_cache, which always answers.
func (r *rig) cacheTool(t *testing.T) einotool.InvokableTool {
	t.Helper()
	cache, err := utils.InferTool("search_cache", "Yesterday's runbooks.", func(context.Context, searchArgs) (string, error) {
		r.cache.Add(1)
		return "cached runbook (yesterday): back off and batch", nil
	})
	require.NoError(t, err)
	return cache
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
	assert.Equal(t, "invoke_agent oncall", roots[0].Name())
	return roots[0]
}

func noBackoff(context.Context, int) time.Duration { return 0 }

// assertFailure asserts that every span of the run that failed with a
// class says class and typ: the root agrees with its children.
func assertFailure(t *testing.T, spans []sdktrace.ReadOnlySpan, class, typ string) {
	t.Helper()
	n := 0
	for _, s := range spans {
		if s.Status().Code != codes.Error || str(s, telemetry.ErrorClass) == "" {
			continue
		}
		n++
		assert.Equal(t, class, str(s, telemetry.ErrorClass), "%s's class", s.Name())
		assert.Equal(t, typ, str(s, semconv.ErrorTypeKey), "%s's error.type", s.Name())
	}
	assert.Positive(t, n, "a failed span")
}

func lastErr(events []*adk.AgentEvent) error {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Err != nil {
			return events[i].Err
		}
	}
	return nil
}

// A provider outage: the inference layer makes its 4 attempts and the run
// fails; every provider request is one leaf span, the root counts them,
// and every failed span, the root's too, says what the provider answered.
func TestProviderOutage(t *testing.T) {
	r := newRig(t, retracetest.Always(retracetest.ServerError(503)))
	events := r.run(t, context.Background(), agentOptions{})

	err := lastErr(events)
	require.Error(t, err)
	var fe *policies.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, telemetry.OutcomeFailedExhausted, fe.Outcome)
	assert.Equal(t, 4, fe.Attempts)

	root := r.root(t)
	assert.Equal(t, 4, r.srv.Requests())
	assert.Equal(t, 4, leafSpans(r.rec.Ended()))
	assert.EqualValues(t, 4, num(root, telemetry.Calls))
	assert.EqualValues(t, 20*4, num(root, telemetry.CallsWorstCase), "20 steps × session(4)")
	assert.Empty(t, retracetest.NestedChains(root), "one retrying layer: nothing nested")
	assert.Equal(t, policies.Transient, fe.Class, "go-openai's APIError, classified by its shape")
	assert.Contains(t, fe.Err.Error(), "status code: 503")
	assertFailure(t, r.rec.Ended(), "transient", "server_error")
	inference := layerSpans(r.rec.Ended(), "session")
	require.Len(t, inference, 1)
	assert.Equal(t, string(telemetry.OutcomeFailedExhausted), str(inference[0], telemetry.Outcome))
	reasons, _ := lookup(inference[0], semconv.GenAIResponseFinishReasonsKey)
	assert.Equal(t, []string{"error"}, reasons.AsStringSlice())
}

// The model calls have the shape of the Session's: the inference span
// "chat {model}" (CLIENT, layer session, gen_ai.operation.name=chat, the
// request's attributes, and the answer's usage, finish reason and ID at its
// end) covers the retry, and each attempt's model span is INTERNAL, with no
// gen_ai.operation.name, so that one logical call is one GenAI operation.
// gen_ai.request.stream says how eino called the model. The root is the
// invoke_agent span with the agent's name.
func TestInferenceSpans(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(map[bool]string{false: "generate", true: "stream"}[streaming], func(t *testing.T) {
			r := newRig(t, retracetest.FailFirst(1, retracetest.ServerError(503)))
			events := r.run(t, context.Background(), agentOptions{streaming: streaming})
			require.NoError(t, lastErr(events))
			assert.Equal(t, retracetest.DefaultReply, answer(t, events))
			spans := r.rec.Ended()

			inference := layerSpans(spans, "session")
			require.Len(t, inference, 1, "one logical model call")
			chat := inference[0]
			assert.Equal(t, "chat gpt-test", chat.Name())
			assert.Equal(t, trace.SpanKindClient, chat.SpanKind())
			assert.Equal(t, "chat", str(chat, semconv.GenAIOperationNameKey))
			assert.Equal(t, "openai", str(chat, semconv.GenAIProviderNameKey))
			assert.Equal(t, "gpt-test", str(chat, semconv.GenAIRequestModelKey))
			stream, ok := lookup(chat, semconv.GenAIRequestStreamKey)
			require.True(t, ok, "gen_ai.request.stream is set per call")
			assert.Equal(t, streaming, stream.AsBool())
			assert.Equal(t, string(telemetry.OutcomeSuccessAfterRetry), str(chat, telemetry.Outcome))
			assert.Positive(t, num(chat, semconv.GenAIUsageInputTokensKey))
			assert.Positive(t, num(chat, semconv.GenAIUsageOutputTokensKey))
			reasons, _ := lookup(chat, semconv.GenAIResponseFinishReasonsKey)
			assert.Equal(t, []string{"stop"}, reasons.AsStringSlice())
			assert.NotEmpty(t, str(chat, semconv.GenAIResponseIDKey), "eino-ext keeps the completion's ID")

			models := layerSpans(spans, "model")
			require.Len(t, models, 2, "a model span per attempt")
			for _, m := range models {
				assert.Equal(t, trace.SpanKindInternal, m.SpanKind())
				_, op := lookup(m, semconv.GenAIOperationNameKey)
				assert.False(t, op, "an attempt is not a GenAI operation of its own")
			}

			root := r.root(t)
			assert.Equal(t, "invoke_agent", str(root, semconv.GenAIOperationNameKey))
			assert.Equal(t, "oncall", str(root, semconv.GenAIAgentNameKey))
			assert.Equal(t, "openai", str(root, semconv.GenAIProviderNameKey))
			assert.EqualValues(t, 2, num(root, telemetry.Calls))
		})
	}
}

// A quota error is fatal: one request, failed_fatal, the root agreeing with
// every span beneath it; with eino's ModelRetryConfig too, whose predicate
// (eino's default, or one the user set, which is still asked) is kept from
// calling again what cannot succeed.
func TestQuotaIsOneRequest(t *testing.T) {
	var asked atomic.Int64
	for _, tc := range []struct {
		name  string
		retry func() *adk.ModelRetryConfig
		asked int64 // how often the user's predicate was asked
	}{
		{name: "without ModelRetryConfig", retry: func() *adk.ModelRetryConfig { return nil }},
		{name: "eino's default predicate", retry: func() *adk.ModelRetryConfig {
			return &adk.ModelRetryConfig{MaxRetries: 2, BackoffFunc: noBackoff}
		}},
		{name: "user's IsRetryAble", asked: 1, retry: func() *adk.ModelRetryConfig {
			return &adk.ModelRetryConfig{MaxRetries: 2, BackoffFunc: noBackoff,
				IsRetryAble: func(context.Context, error) bool { asked.Add(1); return true }}
		}},
		{name: "user's ShouldRetry", asked: 1, retry: func() *adk.ModelRetryConfig {
			return &adk.ModelRetryConfig{MaxRetries: 2, BackoffFunc: noBackoff,
				ShouldRetry: func(_ context.Context, rc *adk.RetryContext) *adk.RetryDecision {
					asked.Add(1)
					return &adk.RetryDecision{Retry: rc.Err != nil}
				}}
		}},
	} {
		for _, streaming := range []bool{false, true} {
			t.Run(tc.name+"/"+map[bool]string{false: "generate", true: "stream"}[streaming], func(t *testing.T) {
				asked.Store(0)
				r := newRig(t, retracetest.Always(retracetest.InsufficientQuota()))
				events := r.run(t, context.Background(), agentOptions{streaming: streaming, modelRetry: tc.retry()})

				err := lastErr(events)
				require.Error(t, err)
				var fe *policies.Error
				require.ErrorAs(t, err, &fe)
				assert.Equal(t, telemetry.OutcomeFailedFatal, fe.Outcome)
				assert.NotErrorIs(t, err, adk.ErrExceedMaxRetries, "eino did not retry")
				assert.Equal(t, 1, r.srv.Requests())
				assert.Equal(t, 1, leafSpans(r.rec.Ended()))
				assert.EqualValues(t, 1, num(r.root(t), telemetry.Calls))
				assert.Equal(t, tc.asked, asked.Load())
				for _, s := range layerSpans(r.rec.Ended(), "session") {
					assert.Equal(t, string(telemetry.OutcomeFailedFatal), str(s, telemetry.Outcome))
				}
				root := r.root(t)
				assert.Equal(t, "fatal", str(root, telemetry.ErrorClass))
				assert.Equal(t, "insufficient_quota", str(root, semconv.ErrorTypeKey))
				assertFailure(t, r.rec.Ended(), "fatal", "insufficient_quota")
			})
		}
	}
}

// eino's ModelRetryConfig runs outside every WrapModel wrapper: each of its
// attempts runs the whole inference layer again. The trace says so before
// the calls happen, and counts them all; the root, classified by the last
// error eino retried (adk.RetryExhaustedError unwraps to eino's marker),
// agrees with the spans beneath it.
func TestModelRetryConfigMultipliesTheSession(t *testing.T) {
	r := newRig(t, retracetest.Always(retracetest.ServerError(503)))
	events := r.run(t, context.Background(), agentOptions{modelRetry: &adk.ModelRetryConfig{
		MaxRetries:  2,
		BackoffFunc: noBackoff,
	}})

	err := lastErr(events)
	require.Error(t, err)
	var exhausted *adk.RetryExhaustedError
	require.ErrorAs(t, err, &exhausted, "eino gave up after its own retries")
	var fe *policies.Error
	require.ErrorAs(t, exhausted.LastErr, &fe, "each of them ran retrace's inference layer to its end")

	root := r.root(t)
	assert.Equal(t, 12, r.srv.Requests(), "eino.ModelRetry(3) × session(4)")
	assert.Equal(t, 12, leafSpans(r.rec.Ended()))
	assert.EqualValues(t, 12, num(root, telemetry.Calls))
	assert.EqualValues(t, 20*12, num(root, telemetry.CallsWorstCase))
	assert.Equal(t, []string{"eino.ModelRetry(3) × session(4)"}, retracetest.NestedChains(root))
	sessions := layerSpans(r.rec.Ended(), "session")
	require.Len(t, sessions, 3)
	for _, s := range sessions {
		assert.Equal(t, "chat gpt-test", s.Name())
		assert.EqualValues(t, 1, num(s, telemetry.RetryDepth), "inside eino's retry")
		assert.Equal(t, string(telemetry.OutcomeFailedExhausted), str(s, telemetry.Outcome))
	}
	assert.Equal(t, string(telemetry.OutcomeFailedExhausted), str(root, telemetry.Outcome))
	assertFailure(t, r.rec.Ended(), "transient", "server_error")
}

// A rejected key is permanent: retrace calls it once, and eino's default
// predicate, which retries every error, is kept from calling it again.
func TestModelRetryConfigStopsOnPermanentErrors(t *testing.T) {
	r := newRig(t, retracetest.Always(retracetest.InvalidAPIKey()))
	events := r.run(t, context.Background(), agentOptions{modelRetry: &adk.ModelRetryConfig{
		MaxRetries:  2,
		BackoffFunc: noBackoff,
	}})
	require.Error(t, lastErr(events))
	root := r.root(t)
	assert.Equal(t, 1, r.srv.Requests(), "retrace stops after one, and so does eino")
	assert.Equal(t, 1, leafSpans(r.rec.Ended()))
	assert.EqualValues(t, 1, num(root, telemetry.Calls))
	for _, s := range layerSpans(r.rec.Ended(), "session") {
		assert.Equal(t, string(telemetry.OutcomeFailedPermanent), str(s, telemetry.Outcome))
	}
	assertFailure(t, r.rec.Ended(), "permanent", "invalid_api_key")
}

// The user's predicate keeps the last word where it says no, and where it
// changes the call: a retry with new input messages after a context
// overflow is not the identical call, so eino may make it; the same
// decision without a change is the identical call, which cannot succeed.
func TestModelRetryConfigKeepsTheUsersPredicate(t *testing.T) {
	trim := func(_ context.Context, rc *adk.RetryContext) *adk.RetryDecision {
		if rc.Err == nil {
			return nil
		}
		return &adk.RetryDecision{Retry: true, ModifiedInputMessages: rc.InputMessages[len(rc.InputMessages)-1:]}
	}
	again := func(_ context.Context, rc *adk.RetryContext) *adk.RetryDecision {
		return &adk.RetryDecision{Retry: rc.Err != nil}
	}
	for _, tc := range []struct {
		name     string
		script   retracetest.Script
		cfg      *adk.ModelRetryConfig
		requests int
		ok       bool
	}{
		{"IsRetryAble says no to a 503", retracetest.Always(retracetest.ServerError(503)),
			&adk.ModelRetryConfig{MaxRetries: 2, BackoffFunc: noBackoff, IsRetryAble: func(context.Context, error) bool { return false }}, 4, false},
		{"ShouldRetry trims the input after an overflow", retracetest.FailFirst(1, retracetest.ContextOverflow()),
			&adk.ModelRetryConfig{MaxRetries: 2, BackoffFunc: noBackoff, ShouldRetry: trim}, 2, true},
		{"ShouldRetry repeats the call after an overflow", retracetest.FailFirst(1, retracetest.ContextOverflow()),
			&adk.ModelRetryConfig{MaxRetries: 2, BackoffFunc: noBackoff, ShouldRetry: again}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.script)
			events := r.run(t, context.Background(), agentOptions{modelRetry: tc.cfg})
			assert.Equal(t, tc.ok, lastErr(events) == nil, "run error: %v", lastErr(events))
			assert.Equal(t, tc.requests, r.srv.Requests())
			assert.Equal(t, tc.requests, leafSpans(r.rec.Ended()))
		})
	}
}

// Agents that share one ModelRetryConfig and one Middleware, run at once:
// the first run governs the config, each run is kept from retrying the
// quota error, and (under -race) the config is changed before any run
// reads it. (One ChatModelAgent is not made to run twice at once: eino's
// own run state races.)
func TestAgentsShareTheGovernedRetry(t *testing.T) {
	r := newRig(t, retracetest.Always(retracetest.InsufficientQuota()))
	ctx := context.Background()
	shared := &adk.ModelRetryConfig{MaxRetries: 2, BackoffFunc: noBackoff}
	const runs = 4
	runners := make([]*adk.Runner, runs)
	for i := range runners {
		runners[i] = r.runner(t, ctx, agentOptions{modelRetry: shared})
	}
	errs := make([]error, runs)
	var wg sync.WaitGroup
	for i, runner := range runners {
		wg.Go(func() { errs[i] = lastErr(query(ctx, runner)) })
	}
	wg.Wait()
	for _, err := range errs {
		var fe *policies.Error
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, telemetry.OutcomeFailedFatal, fe.Outcome)
	}
	assert.Equal(t, runs, r.srv.Requests(), "one request per run")
}

// A stream that ends without its terminator is dropped and retried, with
// middleware.Transport watching the body or without it (eino-ext's stream
// reader ends as cleanly without [DONE] as with it), and so is a stream cut
// by a reset connection: the answer is whole, never the short one. A stream
// that keeps dropping fails as stream_dropped on every span, as retrace's
// own provider's does.
func TestDroppedStreamIsRetried(t *testing.T) {
	for _, fault := range []struct {
		name string
		f    retracetest.Fault
	}{{"missing terminator", retracetest.StreamEOF(1)}, {"reset", retracetest.StreamReset(1)}} {
		for _, plain := range []bool{false, true} {
			name := fault.name + "/" + map[bool]string{false: "Transport", true: "plain HTTP"}[plain]
			t.Run(name+"/once", func(t *testing.T) {
				r := newRig(t, retracetest.FailFirst(1, fault.f))
				events := r.run(t, context.Background(), agentOptions{streaming: true, plainHTTP: plain})
				require.NoError(t, lastErr(events))
				assert.Equal(t, retracetest.DefaultReply, answer(t, events), "the whole answer, not its first chunk")
				assert.Equal(t, 2, r.srv.Requests())
				assert.Equal(t, 2, leafSpans(r.rec.Ended()))
				assert.EqualValues(t, 2, num(r.root(t), telemetry.Calls))
				chat := layerSpans(r.rec.Ended(), "session")
				require.Len(t, chat, 1)
				assert.Equal(t, string(telemetry.OutcomeSuccessAfterRetry), str(chat[0], telemetry.Outcome))
				models := layerSpans(r.rec.Ended(), "model")
				require.Len(t, models, 2)
				assert.Equal(t, "stream_dropped", str(models[0], semconv.ErrorTypeKey))
			})
			t.Run(name+"/always", func(t *testing.T) {
				r := newRig(t, retracetest.Always(fault.f))
				events := r.run(t, context.Background(), agentOptions{streaming: true, plainHTTP: plain})
				err := lastErr(events)
				require.Error(t, err)
				var se *policies.Error
				require.ErrorAs(t, err, &se)
				assert.Equal(t, 4, r.srv.Requests())
				assert.Equal(t, 4, leafSpans(r.rec.Ended()))
				assertFailure(t, r.rec.Ended(), "transient", "stream_dropped")
			})
		}
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
				if str(s, semconv.GenAIToolNameKey) == "search_docs" {
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
		return "", policies.ErrorFrom(resp)
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
