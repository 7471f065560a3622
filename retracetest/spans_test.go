package retracetest_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
)

// tracedCalls makes n calls through a retrying layer around the real
// openai-go client (its retries on, seen by retrace's SDK middleware) and
// returns the spans.
func tracedCalls(t *testing.T, srv *retracetest.Server, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	opts := []middleware.Option{middleware.WithTracerProvider(tp)}
	client := openai.NewClient(option.WithBaseURL(srv.URL()), option.WithAPIKey("sk-test-0000000000000000"),
		option.WithHTTPClient(&http.Client{Transport: transport}), option.WithMaxRetries(1),
		option.WithMiddleware(middleware.SDK("openai-go", 1, opts...)))
	layer := middleware.Layer[string, string]("agent", middleware.Spec[string]{Policies: []failsafe.Policy[string]{policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 2})}}, opts...)
	for range n {
		_, _ = layer(func(ctx context.Context, q string) (string, error) {
			_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(q)}})
			return "", err
		})(context.Background(), "hi")
	}
	return rec.Ended()
}

func TestTraceCountsAgreeWithTheServer(t *testing.T) {
	f := retracetest.ServerError(503)
	f.Header = http.Header{"Retry-After-Ms": {"1"}}
	srv := retracetest.New(retracetest.Always(f))
	require.NoError(t, srv.Start())
	defer srv.Close()

	spans := tracedCalls(t, srv, 1)
	c, err := retracetest.TraceCounts(spans)
	require.NoError(t, err)
	assert.Equal(t, 4, c.LeafSpans, "2 attempts × the SDK's 2")
	assert.Equal(t, int64(4), c.Calls)
	assert.Equal(t, int64(4), c.WorstCase)
	assert.Equal(t, "failed_exhausted", c.Outcome)
	assert.Contains(t, c.Diagnosis, "failed after 2 attempts")
	assert.NoError(t, srv.CheckCounts(spans))

	// A request the trace did not see makes the counts disagree.
	srv.Reset()
	spans = tracedCalls(t, srv, 1)
	other := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	if resp, err := other.Post(srv.URL()+"/chat/completions", "application/json", nil); err == nil {
		_ = resp.Body.Close()
	}
	other.CloseIdleConnections()
	assert.ErrorContains(t, srv.CheckCounts(spans), "5 requests, 4 leaf spans and retrace.calls 4 differ")
}

func TestTraceCountsRefusesMixedOrPartialTraces(t *testing.T) {
	srv := retracetest.New(retracetest.Always(retracetest.OK()))
	require.NoError(t, srv.Start())
	defer srv.Close()
	spans := tracedCalls(t, srv, 2)

	_, err := retracetest.TraceCounts(spans)
	assert.ErrorContains(t, err, "give the spans of one trace")
	traces := retracetest.ByTrace(spans)
	require.Len(t, traces, 2)
	for _, tr := range traces {
		c, err := retracetest.TraceCounts(tr)
		require.NoError(t, err)
		assert.Equal(t, int64(1), c.Calls)
		assert.Equal(t, 1, c.LeafSpans)
	}
	_, err = retracetest.TraceCounts(traces[0][:1])
	assert.ErrorContains(t, err, "has no root span", "the root ends last")
	_, err = retracetest.TraceCounts(nil)
	assert.Error(t, err)
}

// A breaker's refusal reaches nothing and is no leaf; its half-open probe
// reaches the server beneath the breaker's span and is one.
func TestTraceCountsThroughABreaker(t *testing.T) {
	srv := retracetest.New(retracetest.Always(retracetest.ServerError(503)))
	require.NoError(t, srv.Start())
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
	clk := clock.NewFake(time.Unix(0, 0))
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	layer := middleware.Layer[string, string]("model", middleware.Spec[string]{Policies: []failsafe.Policy[string]{policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3}), policies.NewCircuitBreaker[string](policies.BreakerConfig{Name: "provider", FailureThreshold: 2, Delay: time.Second})}}, middleware.WithTracerProvider(tp), middleware.WithClock(clk))
	call := layer(func(ctx context.Context, _ string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/chat/completions", strings.NewReader("{}"))
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		_ = resp.Body.Close()
		return "", &policies.Error{StatusCode: resp.StatusCode}
	})

	check := func(wantRequests int) {
		t.Helper()
		spans := rec.Ended()
		traces := retracetest.ByTrace(spans)
		last := traces[len(traces)-1]
		c, err := retracetest.TraceCounts(last)
		require.NoError(t, err)
		assert.Equal(t, wantRequests, c.LeafSpans)
		assert.Equal(t, int64(wantRequests), c.Calls)
		assert.Equal(t, "rejected", c.Outcome)
		assert.NoError(t, srv.CheckCounts(last))
	}
	_, err := call(context.Background(), "")
	require.Error(t, err)
	check(2) // two failures open the breaker, which ends the call

	srv.Reset()
	_, err = call(context.Background(), "")
	require.Error(t, err)
	check(0) // the open breaker refuses the first attempt: it reached nothing

	srv.Reset()
	clk.Advance(time.Second)
	_, err = call(context.Background(), "")
	require.Error(t, err)
	check(1) // the probe, under the half-open breaker's span, fails and reopens it
	var probe bool
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == "retrace.circuit.state" && kv.Value.AsString() == "half_open" {
				probe = true
			}
		}
	}
	assert.True(t, probe, "the probe ran beneath a half-open breaker's span")
}

// NestedChains reads the chain a real nested layer announces on its root,
// under the names package telemetry gives the event and its attribute.
func TestNestedChains(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	opts := []middleware.Option{middleware.WithTracerProvider(tp)}
	h := middleware.Chain(
		middleware.Layer[string, string]("runtime", middleware.Spec[string]{Policies: []failsafe.Policy[string]{policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3})}}, opts...),
		middleware.Layer[string, string]("session", middleware.Spec[string]{Policies: []failsafe.Policy[string]{policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 4})}}, opts...),
	)(func(context.Context, string) (string, error) { return "ok", nil })
	_, err := h(context.Background(), "x")
	require.NoError(t, err)
	var root sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if !s.Parent().IsValid() {
			root = s
		}
		if s.Parent().IsValid() {
			assert.Empty(t, retracetest.NestedChains(s), "only the root announces")
		}
	}
	require.NotNil(t, root)
	assert.Equal(t, []string{"runtime(3) × session(4)"}, retracetest.NestedChains(root))
	for _, e := range root.Events() {
		assert.Equal(t, telemetry.EventNestedRetry, e.Name)
		assert.Contains(t, e.Attributes, telemetry.NestedLayers.String("runtime(3) × session(4)"))
	}
}
