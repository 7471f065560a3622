package middleware_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/retrace-go/retrace/internal/failure"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
)

// ownStream is a user's own streaming call through openai-go with
// retrace's SDK middleware (sdkOpts) and the SDK's retries, inside a
// retrying layer "session" whose options are sessionOpts: the text the
// user's stream reader got, and the error.
func ownStream(t *testing.T, srv *retracetest.Server, maxRetries, sessionAttempts int, sessionOpts, sdkOpts []middleware.Option) (string, error) {
	t.Helper()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(transport.CloseIdleConnections)
	client := openai.NewClient(
		option.WithBaseURL(srv.URL()), option.WithAPIKey("sk-test-0000000000000000"),
		option.WithHTTPClient(&http.Client{Transport: transport}),
		option.WithMaxRetries(maxRetries),
		option.WithMiddleware(middleware.SDK("openai-go", maxRetries, sdkOpts...)),
	)
	var text string
	session := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: sessionAttempts})), sessionOpts...)
	_, err := session(func(ctx context.Context, prompt string) (string, error) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		})
		defer func() { _ = stream.Close() }()
		var b strings.Builder
		for stream.Next() {
			for _, c := range stream.Current().Choices {
				b.WriteString(c.Delta.Content)
			}
		}
		if err := stream.Err(); err != nil {
			return "", err
		}
		text = b.String()
		return text, nil
	})(context.Background(), "hello")
	return text, err
}

func started(t *testing.T, script retracetest.Script) *retracetest.Server {
	t.Helper()
	srv := retracetest.New(script)
	require.NoError(t, srv.Start())
	t.Cleanup(srv.Close)
	return srv
}

// What retrace classifies as not retryable, the SDK does not resend: a
// spent quota is one request, not the SDK's three; a transient failure is
// still the SDK's to retry.
func TestSDKNotToldToResendAFatalAnswer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fault    retracetest.Fault
		requests int
		outcome  string
	}{
		{"quota", retracetest.InsufficientQuota(), 1, telemetry.OutcomeFailedFatal},
		{"invalid key", retracetest.InvalidAPIKey(), 1, telemetry.OutcomeFailedPermanent},
		{"overflow", retracetest.ContextOverflow(), 1, telemetry.OutcomeFailedPermanent},
		{"503", down503(), 3, telemetry.OutcomeFailedExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := started(t, retracetest.Always(tc.fault))
			rec, tp := recorder(t)
			_, err := ownStream(t, srv, 2, 1, []middleware.Option{tp}, nil)
			require.Error(t, err)
			assert.Equal(t, tc.requests, srv.Requests())
			require.NoError(t, srv.CheckCounts(rec.Ended()))
			c := policies.Classify(err)
			if tc.name == "overflow" {
				assert.Equal(t, policies.ContextOverflow, c.Class)
			}
			if tc.name == "quota" {
				assert.Equal(t, policies.Fatal, c.Class, c.Reason)
				assert.Equal(t, "insufficient_quota", c.Type)
				var fe *policies.Error
				require.ErrorAs(t, err, &fe)
				assert.Equal(t, tc.outcome, fe.Outcome, "the user's own client under a session layer ends failed_fatal")
				assert.Contains(t, fe.Diagnosis(), "429 insufficient_quota: You exceeded your current quota", "the provider's words, not only the SDK's")
			}
		})
	}
}

// A stream that ends without its terminator, or whose connection resets,
// fails the user's own stream reader with a classified stream_dropped
// error, which the session layer retries; the request's span says so too.
func TestSDKStreamWithoutItsTerminatorIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault retracetest.Fault
	}{
		{"no [DONE]", retracetest.StreamEOF(1)},
		{"no event at all", retracetest.StreamEOF(0)},
		{"reset", retracetest.StreamReset(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := started(t, retracetest.FailFirst(1, tc.fault))
			rec, tp := recorder(t)
			text, err := ownStream(t, srv, 0, 2, []middleware.Option{tp}, nil)
			require.NoError(t, err)
			assert.Equal(t, retracetest.DefaultReply, text, "the second attempt's whole answer, never the short one")
			assert.Equal(t, 2, srv.Requests())
			require.NoError(t, srv.CheckCounts(rec.Ended()))

			posts := clientSpans(rec)
			require.Len(t, posts, 2)
			assert.Equal(t, "transient", str(posts[0], "retrace.error.class"))
			assert.Equal(t, "stream_dropped", str(posts[0], "error.type"), "the request's span ends with its body")
			assert.Empty(t, str(posts[1], "error.type"))
			attempts := attemptSpans(rec, "session")
			require.Len(t, attempts, 2)
			assert.Equal(t, "stream_dropped", str(attempts[0], "error.type"))
		})
	}
	t.Run("the reader's error", func(t *testing.T) {
		srv := started(t, retracetest.Always(retracetest.StreamEOF(1)))
		_, tp := recorder(t)
		_, err := ownStream(t, srv, 0, 1, []middleware.Option{tp}, nil)
		se, ok := failure.Underlying(err).(*policies.Error)
		require.True(t, ok, "%v", err)
		assert.Equal(t, "stream_dropped", se.Type)
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
		assert.Contains(t, se.Err.Error(), "without [DONE]")
	})
}

// anthropic-sdk-go's stream reader meets the same: no message_stop, a
// stream_dropped error, not a short answer.
func TestSDKAnthropicStreamWithoutMessageStop(t *testing.T) {
	srv := started(t, retracetest.Always(retracetest.StreamEOF(1)))
	rec, tp := recorder(t)
	client := anthropic.NewClient(aoption.WithBaseURL(srv.AnthropicURL()), aoption.WithAPIKey("sk-ant-test-000000000000"),
		aoption.WithMaxRetries(0), aoption.WithMiddleware(middleware.SDK("anthropic-sdk-go", 0)))
	layer := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 2})), tp)
	_, err := layer(func(ctx context.Context, prompt string) (string, error) {
		stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
			Model: "claude-test", MaxTokens: 64, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
		})
		defer func() { _ = stream.Close() }()
		for stream.Next() {
		}
		return "", stream.Err()
	})(context.Background(), "hello")
	se, ok := failure.Underlying(err).(*policies.Error)
	require.True(t, ok, "%v", err)
	assert.Contains(t, se.Err.Error(), "without message_stop")
	assert.Equal(t, "stream_dropped", policies.Classify(err).Type)
	assert.Equal(t, 2, srv.Requests(), "retried as a dropped stream")
	require.NoError(t, srv.CheckCounts(rec.Ended()))
}

// An SDK middleware given no tracer provider records where the enclosing
// layer does: with a provider that is not the global one, every request is
// a span of the trace, so requests = leaf spans = retrace.calls.
func TestSDKInheritsTheEnclosingProvider(t *testing.T) {
	srv := started(t, retracetest.FailFirst(1, down503()))
	rec, tp := recorder(t)
	_, err := ownStream(t, srv, 1, 2, []middleware.Option{tp}, nil)
	require.NoError(t, err)
	assert.Equal(t, 2, srv.Requests())
	assert.Len(t, clientSpans(rec), 2)
	require.NoError(t, srv.CheckCounts(rec.Ended()))
}

// Where the request's spans cannot be recorded (the middleware was given a
// provider that records nothing), retrace.calls counts only what the trace
// shows, and the root says how many more were made: no silent loss.
func TestSDKUntracedRequestsAreNotCounted(t *testing.T) {
	srv := started(t, retracetest.FailFirst(1, down503()))
	rec, tp := recorder(t)
	_, err := ownStream(t, srv, 1, 2, []middleware.Option{tp}, []middleware.Option{middleware.WithTracerProvider(noop.NewTracerProvider())})
	require.NoError(t, err)
	assert.Equal(t, 2, srv.Requests())
	assert.Empty(t, clientSpans(rec))
	root := rootSpan(t, rec)
	assert.Zero(t, num(root, "retrace.calls"))
	assert.Equal(t, int64(2), num(root, "retrace.calls.untraced"))
}

// The key a user's own client sends is a secret of the call: a provider that
// echoes it in its error leaves it on no span, the request's or the layers'
// above it.
func TestSDKCredentialsAreSecrets(t *testing.T) {
	const key = "plainkey0123456789abcdef" // no pattern knows it: only its exact value can be redacted
	for _, tc := range []struct {
		name   string
		header func(*http.Request) // nil: the SDK's own Authorization
	}{
		{"bearer", nil},
		{"x-api-key", func(r *http.Request) { r.Header.Del("Authorization"); r.Header.Set("x-api-key", key) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := started(t, retracetest.Always(retracetest.Status(401, "invalid_api_key", "invalid_request_error",
				"Incorrect API key provided: "+key+".")))
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			opts := []option.RequestOption{option.WithBaseURL(srv.URL()), option.WithAPIKey(key), option.WithMaxRetries(0)}
			if tc.header != nil {
				opts = append(opts, option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
					tc.header(r)
					return next(r)
				}))
			}
			// Outermost first: the header is set before retrace's middleware sees the request.
			opts = append(opts, option.WithMiddleware(middleware.SDK("openai-go", 0)))
			client := openai.NewClient(opts...)
			layer := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 2})), middleware.WithTracerProvider(tp))
			_, err := layer(func(ctx context.Context, prompt string) (string, error) {
				_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
					Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
				})
				return "", err
			})(context.Background(), "hello")
			require.Error(t, err)
			spans := rec.Ended()
			require.Len(t, spans, 3, "the request's span, the session's attempt and the session's span: a 401 is not retried")
			for _, s := range spans {
				assert.NotContains(t, s.Status().Description, key, s.Name())
				for _, kv := range s.Attributes() {
					assert.NotContains(t, kv.Value.String(), key, "%s: %s", s.Name(), kv.Key)
				}
			}
			for _, s := range spans {
				assert.Contains(t, s.Status().Description, "Incorrect API key provided: [REDACTED]", "%s: the message is kept, the key is not", s.Name())
			}
			var fe *policies.Error
			require.True(t, errors.As(err, &fe))
			assert.NotContains(t, fe.Error(), key, "nor in the error the layer built")
		})
	}
}

// An error that says nothing of itself, returned by a handler whose SDK
// request beneath read the provider's answer, takes that answer's class:
// the failure is classified once, where the answer was read, and carried up.
func TestFailureBeneathCarriedUp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault retracetest.Fault
		class policies.Class
		typ   string
	}{
		{"error answer", retracetest.InsufficientQuota(), policies.Fatal, "insufficient_quota"},
		{"error event", retracetest.ErrorEvent(1, "insufficient_quota", "insufficient_quota", "Quota."), policies.Fatal, "insufficient_quota"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := started(t, retracetest.Always(tc.fault))
			rec, tp := recorder(t)
			client := openai.NewClient(option.WithBaseURL(srv.URL()), option.WithAPIKey("sk-test-0000000000000000"),
				option.WithMaxRetries(0), option.WithMiddleware(middleware.SDK("openai-go", 0)))
			layer := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3})), tp)
			_, err := layer(func(ctx context.Context, prompt string) (string, error) {
				stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
					Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
				})
				for stream.Next() {
				}
				_ = stream.Close()
				if stream.Err() != nil {
					return "", errors.New("the model call failed") // the SDK's error, in the user's words
				}
				return "", nil
			})(context.Background(), "hello")
			require.Error(t, err)
			c := policies.Classify(err)
			assert.Equal(t, tc.class, c.Class, c.Reason)
			assert.Equal(t, tc.typ, c.Type)
			assert.Equal(t, 1, srv.Requests(), "not retried")
			require.NoError(t, srv.CheckCounts(rec.Ended()))
			for _, s := range rec.Ended() {
				assert.Equal(t, tc.typ, str(s, "error.type"), s.Name())
			}
		})
	}
	t.Run("a success beneath is no excuse", func(t *testing.T) {
		srv := started(t, retracetest.Always(retracetest.OK()))
		_, tp := recorder(t)
		client := openai.NewClient(option.WithBaseURL(srv.URL()), option.WithAPIKey("sk-test-0000000000000000"),
			option.WithMaxRetries(0), option.WithMiddleware(middleware.SDK("openai-go", 0)))
		layer := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3})), tp)
		_, err := layer(func(ctx context.Context, prompt string) (string, error) {
			_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
			})
			require.NoError(t, err)
			return "", errors.New("my own bug after a good answer")
		})(context.Background(), "hello")
		assert.Equal(t, policies.Unknown, policies.Classify(err).Class)
	})
}

// Beneath a layer that declared the retry loop its handler runs (a
// framework's, which reads no x-should-retry), the loop's resend of a
// request that failed fatally is not sent: the provider sees one request,
// the loop gets the same class back at once. A transient failure is the
// loop's to retry.
func TestDeclaredInnerLoopResendsNothingThatCannotSucceed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fault    retracetest.Fault
		requests int
		class    policies.Class
	}{
		{"quota", retracetest.InsufficientQuota(), 1, policies.Fatal},
		{"invalid key", retracetest.InvalidAPIKey(), 1, policies.Permanent},
		{"503", down503(), 3, policies.Transient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := started(t, retracetest.Always(tc.fault))
			rec, tp := recorder(t)
			client := openai.NewClient(option.WithBaseURL(srv.URL()), option.WithAPIKey("sk-test-0000000000000000"),
				option.WithMaxRetries(0), option.WithMiddleware(middleware.SDK("openai-go", 0)))
			layer := middleware.Layer[string, string]("model", middleware.Spec[string]{}, tp, middleware.WithInnerRetries("fw.Retry", 3))
			_, err := layer(func(ctx context.Context, prompt string) (string, error) {
				var err error
				for range 3 { // the framework's loop: it retries whatever fails
					if _, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
						Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
					}); err == nil {
						return "ok", nil
					}
				}
				return "", err
			})(context.Background(), "hello")
			require.Error(t, err)
			assert.Equal(t, tc.requests, srv.Requests())
			c := policies.Classify(err)
			assert.Equal(t, tc.class, c.Class, c.Reason)
			require.NoError(t, srv.CheckCounts(rec.Ended()))
		})
	}
}
