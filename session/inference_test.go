package session_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
)

type reply struct {
	text   string
	in     int
	finish string
}

// A handler of the user's own types, put under the Session's two layers,
// makes the spans a Session makes: the inference span "chat {model}"
// (CLIENT, the GenAI attributes, the answer's usage and finish reason),
// covering the retry; an INTERNAL attempt and model span per attempt.
func TestInferenceLayersOnAHandler(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	calls := 0
	call := session.InferenceLayers[string](session.Inference[reply]{
		Provider: "acme", Model: "m-1", Server: "api.acme.test", Port: 443,
		Options: []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(clock.NewVirtual(epoch))},
		Describe: func(r reply) session.Message {
			return session.Message{Usage: session.Usage{InputTokens: r.in}, StopReason: r.finish}
		},
	})(func(ctx context.Context, prompt string) (reply, error) {
		calls++
		if calls == 1 {
			return reply{}, &policies.Error{StatusCode: 503, Code: "server_error"}
		}
		return reply{text: "hi " + prompt, in: 7, finish: "stop"}, nil
	})
	got, err := call(context.Background(), "you")
	require.NoError(t, err)
	assert.Equal(t, "hi you", got.text)

	var chat, model []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "chat m-1":
			chat = append(chat, s)
		case "model":
			model = append(model, s)
		}
	}
	require.Len(t, chat, 1)
	c := chat[0]
	assert.Equal(t, trace.SpanKindClient, c.SpanKind())
	assert.Equal(t, "chat", v(c, semconv.GenAIOperation))
	assert.Equal(t, "acme", v(c, semconv.GenAIProvider))
	assert.Equal(t, "m-1", v(c, semconv.GenAIRequestModel))
	assert.Equal(t, "api.acme.test", v(c, semconv.ServerAddress))
	assert.Equal(t, "success_after_retry", v(c, telemetry.Outcome))
	assert.Equal(t, "7", v(c, semconv.GenAIInputTokens))
	assert.Equal(t, `["stop"]`, v(c, semconv.GenAIFinishReasons))
	require.Len(t, model, 2, "a model span per attempt")
	for _, m := range model {
		assert.Equal(t, trace.SpanKindInternal, m.SpanKind())
		_, has := attr(m, semconv.GenAIOperation)
		assert.False(t, has, "one GenAI operation per logical call")
	}
}

// The defaults are the Session's: SessionRetry's 4 attempts, unknown errors
// not retried.
func TestInferenceDefaults(t *testing.T) {
	calls := 0
	call := session.InferenceLayers[string](session.Inference[reply]{
		Options: []middleware.Option{middleware.WithClock(clock.NewVirtual(epoch))},
	})(func(ctx context.Context, _ string) (reply, error) {
		calls++
		return reply{}, &policies.Error{StatusCode: 503}
	})
	_, err := call(context.Background(), "x")
	require.Error(t, err)
	assert.Equal(t, 4, calls)

	calls = 0
	unknown := session.InferenceLayers[string](session.Inference[reply]{})(func(context.Context, string) (reply, error) {
		calls++
		return reply{}, errors.New("something nobody knows")
	})
	_, err = unknown(context.Background(), "x")
	require.Error(t, err)
	assert.Equal(t, 1, calls)
	assert.Equal(t, telemetry.OutcomeFailedUnknown, outcomeOf(err))
}

func outcomeOf(err error) string {
	var fe *policies.Error
	if errors.As(err, &fe) {
		return fe.Outcome
	}
	return ""
}
