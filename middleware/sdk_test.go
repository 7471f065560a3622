package middleware_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/instrument"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
)

// down503 is a 503 whose retry-after-ms lets the SDK retry at once.
func down503() retracetest.Fault {
	f := retracetest.ServerError(503)
	f.Header = http.Header{"Retry-After-Ms": {"1"}}
	return f
}

// sdkCall makes one chat completion through the real openai-go client, with
// its own retries (maxRetries) and retrace's SDK middleware, inside a
// retrying layer "session" of sessionAttempts: the requests, the spans and
// the error it ended with.
func sdkCall(t *testing.T, script retracetest.Script, maxRetries, sessionAttempts int, opts ...middleware.Option) (*retracetest.Server, *tracetest.SpanRecorder, error) {
	t.Helper()
	srv := retracetest.New(script)
	require.NoError(t, srv.Start())
	t.Cleanup(srv.Close)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	transport := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(transport.CloseIdleConnections)

	opts = append([]middleware.Option{middleware.WithTracerProvider(tp)}, opts...)
	client := openai.NewClient(
		option.WithBaseURL(srv.URL()), option.WithAPIKey("sk-test-0000000000000000"),
		option.WithHTTPClient(&http.Client{Transport: transport}),
		option.WithMaxRetries(maxRetries),
		option.WithMiddleware(middleware.SDK("openai-go", maxRetries, opts...)),
	)
	session := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: sessionAttempts})), opts...)
	_, err := session(func(ctx context.Context, prompt string) (string, error) {
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-test",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		})
		if err != nil {
			return "", err
		}
		return c.Choices[0].Message.Content, nil
	})(context.Background(), "hello")
	return srv, rec, err
}

func clientSpans(rec *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindClient {
			out = append(out, s)
		}
	}
	return out
}

// The SDK's three requests of one call are three client spans, numbered 0,
// 1, 2 by the SDK's retry count, each a leaf in retrace.calls; the SDK is a
// retrying layer in the nested-retry event and in the worst case.
func TestSDKMiddlewareShowsTheSDKsRetries(t *testing.T) {
	srv, rec, err := sdkCall(t, retracetest.Always(down503()), 2, 2)
	require.Error(t, err)
	assert.Equal(t, 6, srv.Requests(), "2 session attempts × 3 SDK attempts")

	spans := clientSpans(rec)
	require.Len(t, spans, 6, "a client span per physical request")
	for i, s := range spans {
		assert.Equal(t, "POST", s.Name())
		resend, ok := spanAttr(s, "http.request.resend_count")
		require.True(t, ok)
		assert.Equal(t, int64(i%3), resend.AsInt64(), "request %d", i+1)
		status, _ := spanAttr(s, "http.response.status_code")
		assert.Equal(t, int64(503), status.AsInt64())
		class, _ := spanAttr(s, "retrace.error.class")
		assert.Equal(t, "transient", class.AsString())
		typ, _ := spanAttr(s, "error.type")
		assert.Equal(t, "server_error", typ.AsString(), "the provider's code")
		full, _ := spanAttr(s, "url.full")
		assert.True(t, strings.HasPrefix(full.AsString(), srv.URL()), full.AsString())
		for _, kv := range s.Attributes() {
			assert.NotContains(t, kv.Value.String(), "sk-test", "no key in %s", kv.Key)
		}
	}

	root := rootSpan(t, rec)
	calls, _ := spanAttr(root, "retrace.calls")
	assert.Equal(t, int64(6), calls.AsInt64(), "provider requests = leaf spans = retrace.calls")
	for _, s := range rec.Ended() {
		// A status carries the error's message only: the layer, attempts and
		// status code are attributes of their own.
		if s.SpanKind() == trace.SpanKindClient {
			assert.Equal(t, "Service unavailable", s.Status().Description, "the provider's words")
		}
		assert.NotContains(t, s.Status().Description, "failed after", s.Name())
		assert.NotContains(t, s.Status().Description, "session:", s.Name())
	}
	diag, _ := spanAttr(root, "retrace.diagnosis")
	assert.Contains(t, diag.AsString(), "failed after 2 attempts", "the diagnosis keeps the whole account")
	worst, _ := spanAttr(root, "retrace.calls.worst_case")
	assert.Equal(t, int64(6), worst.AsInt64())
	var chains []string
	for _, e := range root.Events() {
		if e.Name == "retrace.nested_retry" {
			for _, kv := range e.Attributes {
				if kv.Key == "retrace.nested.layers" {
					chains = append(chains, kv.Value.AsString())
				}
			}
		}
	}
	assert.Equal(t, []string{"session(2) × openai-go(3)"}, chains, "the SDK named, announced once")
}

// A request the SDK does not retry (a 401) is one span; a success after two
// SDK retries is three, the last one without an error.
func TestSDKMiddlewareSuccessAfterSDKRetries(t *testing.T) {
	srv, rec, err := sdkCall(t, retracetest.Sequence(down503(), down503(), retracetest.OK()), 2, 1)
	require.NoError(t, err)
	assert.Equal(t, 3, srv.Requests())
	spans := clientSpans(rec)
	require.Len(t, spans, 3)
	_, failed := spanAttr(spans[2], "retrace.error.class")
	assert.False(t, failed, "the answered request carries no error")
	status, _ := spanAttr(spans[2], "http.response.status_code")
	assert.Equal(t, int64(200), status.AsInt64())
	calls, _ := spanAttr(rootSpan(t, rec), "retrace.calls")
	assert.Equal(t, int64(3), calls.AsInt64())

	srv, rec, err = sdkCall(t, retracetest.Always(retracetest.InvalidAPIKey()), 2, 3)
	require.Error(t, err)
	assert.Equal(t, 1, srv.Requests(), "neither the SDK nor the layer retries a 401")
	require.Len(t, clientSpans(rec), 1)
	class, _ := spanAttr(clientSpans(rec)[0], "retrace.error.class")
	assert.Equal(t, "permanent", class.AsString())
}

// Declared twice (the layer above also declares the SDK's attempts), the
// SDK's attempts count once.
func TestSDKMiddlewareUnderDeclaredInnerAttempts(t *testing.T) {
	srv := retracetest.New(retracetest.Always(down503()))
	require.NoError(t, srv.Start())
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	client := openai.NewClient(option.WithBaseURL(srv.URL()), option.WithAPIKey("sk-test-0000000000000000"),
		option.WithHTTPClient(&http.Client{Transport: transport}), option.WithMaxRetries(2),
		option.WithMiddleware(middleware.SDK("openai-go", 2, middleware.WithTracerProvider(tp))))
	model := middleware.Layer[string, string]("model", middleware.Spec[string]{}, middleware.WithTracerProvider(tp), middleware.WithInnerRetries("openai-go", 3))
	_, err := model(func(ctx context.Context, prompt string) (string, error) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}})
		return "", err
	})(context.Background(), "hello")
	require.Error(t, err)
	root := rootSpan(t, rec)
	calls, _ := spanAttr(root, "retrace.calls")
	worst, _ := spanAttr(root, "retrace.calls.worst_case")
	assert.Equal(t, int64(3), calls.AsInt64())
	assert.Equal(t, int64(3), worst.AsInt64(), "3, not 3 × 3")
}

// Every span's instrumentation scope names retrace, its version and the
// conventions' schema it follows.
func TestScopeHasVersionAndSchema(t *testing.T) {
	_, rec, err := sdkCall(t, retracetest.Always(retracetest.OK()), 0, 1)
	require.NoError(t, err)
	require.NotEmpty(t, rec.Ended())
	for _, s := range rec.Ended() {
		sc := s.InstrumentationScope()
		assert.Equal(t, "github.com/retrace-go/retrace", sc.Name)
		assert.Equal(t, instrument.Version, sc.Version)
		assert.Equal(t, instrument.SchemaURL, sc.SchemaURL)
	}
}
