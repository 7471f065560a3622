package retracetest_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
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
	layer := middleware.PoliciesWith[string, string]("agent", opts, policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 2}))
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
