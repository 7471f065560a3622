package session_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
)

// A compactor or a stream callback that panics does not escape Run, and
// Run leaves the history as it was before the call.
func TestPanicsLeaveTheHistoryAsItWas(t *testing.T) {
	for name, mod := range map[string]func(*session.Config){
		"compactor": func(c *session.Config) {
			c.Compactor = func(context.Context, []session.Message) ([]session.Message, error) { panic("compactor bug") }
		},
		"OnDelta": func(c *session.Config) {
			c.OnDelta = func(session.Delta) { panic("callback bug") }
		},
	} {
		t.Run(name, func(t *testing.T) {
			script := retracetest.Always(retracetest.ContextOverflow())
			if name == "OnDelta" {
				script = retracetest.Always(retracetest.Reply("hello there"))
			}
			f := start(t, script, mod)
			f.s.Append(session.Message{Role: session.User, Content: "earlier"}, session.Message{Role: session.Assistant, Content: "ok"})
			before := f.s.History()
			var err error
			require.NotPanics(t, func() { _, err = f.s.Run(context.Background(), "a prompt") })
			require.Error(t, err)
			assert.Equal(t, policies.Programming, policies.Classify(err).Class, "a bug, never retried")
			assert.Equal(t, 1, f.srv.Requests())
			assert.Equal(t, before, f.s.History(), "the history is as it was")
		})
	}
}

// The configured API key is redacted by its exact value, even in no known
// shape: a key echoed back in OpenAI's own wording reaches no span,
// no error, and not the history.
func TestConfiguredKeyNeverLeaks(t *testing.T) {
	const key = "Zq7xW2.tenant.91" // in no shape a pattern knows: only its exact value can redact it
	srv := retracetest.New(retracetest.Always(retracetest.Status(401, "invalid_api_key", "invalid_request_error",
		"Incorrect API key provided: "+key+". You can find your API key at https://platform.openai.com/account/api-keys.")))
	require.NoError(t, srv.Start())
	t.Cleanup(srv.Close)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s, err := session.New(session.Config{
		Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: key}),
		Model:    "gpt-test",
		Options:  []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(clock.NewVirtual(epoch))},
	})
	require.NoError(t, err)
	msg, err := s.Run(context.Background(), "hi")
	require.Error(t, err)
	assert.Equal(t, 1, srv.Requests())
	assert.NotContains(t, err.Error(), key)
	assert.NotContains(t, msg.ErrorMessage, key)
	require.NotEmpty(t, rec.Ended())
	for _, sp := range rec.Ended() {
		assert.NotContains(t, sp.Status().Description, key, sp.Name())
		for _, kv := range sp.Attributes() {
			assert.NotContains(t, kv.Value.String(), key, "%s on %s", kv.Key, sp.Name())
		}
	}
	assert.Contains(t, err.Error(), "Incorrect API key provided: [REDACTED]")
}
