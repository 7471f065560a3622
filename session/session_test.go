package session_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/timeout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

type fixture struct {
	srv *retracetest.Server
	rec *tracetest.SpanRecorder
	clk *clock.Fake
	s   *session.Session
}

// start runs a fault server with script and a session against it through
// the real openai-go client, on a virtual clock.
func start(t *testing.T, script retracetest.Script, mod func(*session.Config)) *fixture {
	t.Helper()
	srv := retracetest.New(script)
	require.NoError(t, srv.Start())
	t.Cleanup(srv.Close)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	clk := clock.NewVirtual(epoch)
	cfg := session.Config{
		Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-test-0123456789abcdefghij"}),
		Model:    "gpt-test",
		System:   "You are terse.",
		Options:  []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(clk)},
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := session.New(cfg)
	require.NoError(t, err)
	return &fixture{srv: srv, rec: rec, clk: clk, s: s}
}

func (f *fixture) spans(layer string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range f.rec.Ended() {
		if v(s, telemetry.Layer) == layer {
			_, attempt := attr(s, telemetry.Attempt)
			_, policy := attr(s, telemetry.Policy)
			if !attempt && !policy {
				out = append(out, s)
			}
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func v(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	x, _ := attr(s, k)
	return x.String()
}

func TestStreamingSuccess(t *testing.T) {
	var deltas []string
	f := start(t, retracetest.Always(retracetest.Reply("All systems nominal.")), func(c *session.Config) {
		c.OnDelta = func(d session.Delta) { deltas = append(deltas, d.Text) }
	})
	msg, err := f.s.Run(context.Background(), "status?")
	require.NoError(t, err)
	assert.Equal(t, "All systems nominal.", msg.Content)
	assert.Equal(t, session.StopEnd, msg.StopReason)
	assert.Equal(t, "All systems nominal.", strings.Join(deltas, ""))
	assert.Greater(t, msg.Usage.InputTokens, 0)
	assert.Equal(t, 3, msg.Usage.OutputTokens)

	// The logical model call is the session's span: a CLIENT "chat {model}"
	// span that covers the retries; the model layer within is INTERNAL.
	model := f.spans("model")
	require.Len(t, model, 1)
	assert.Equal(t, "model", model[0].Name())
	assert.Equal(t, trace.SpanKindInternal, model[0].SpanKind())
	assert.Empty(t, v(model[0], semconv.GenAIOperation), "only the inference span is an inference")
	chat := f.spans("session")
	require.Len(t, chat, 1)
	assert.Equal(t, "chat gpt-test", chat[0].Name())
	assert.Equal(t, trace.SpanKindClient, chat[0].SpanKind())
	assert.Equal(t, "chat", v(chat[0], semconv.GenAIOperation))
	assert.Equal(t, "openai", v(chat[0], semconv.GenAIProvider))
	assert.Equal(t, "gpt-test", v(chat[0], semconv.GenAIRequestModel))
	assert.Equal(t, "true", v(chat[0], semconv.GenAIRequestStream))
	assert.Equal(t, "127.0.0.1", v(chat[0], semconv.ServerAddress))
	assert.NotEmpty(t, v(chat[0], semconv.ServerPort))
	assert.Equal(t, "3", v(chat[0], semconv.GenAIOutputTokens))
	assert.Equal(t, `["stop"]`, v(chat[0], semconv.GenAIFinishReasons))
	assert.NotEmpty(t, v(chat[0], semconv.GenAIResponseID), "the completion's ID")
	assert.NotEmpty(t, v(chat[0], semconv.GenAITimeToFirstChunk))
	assert.Greater(t, msg.FirstChunk, time.Duration(0))
	for _, s := range f.rec.Ended() {
		for _, kv := range s.Attributes() {
			assert.NotContains(t, kv.Value.String(), "0123456789abcdefghij", "the API key reached a span")
		}
	}
	req := f.srv.Received()[0]
	assert.Equal(t, []string{"system", "user"}, roles(req.Messages))
	assert.Equal(t, "Bearer ***ghij", req.Header.Get("Authorization"), "the key was sent (masked in the server's log)")
	assert.Equal(t, []string{"user", "assistant"}, historyRoles(f.s.History()))
}

func roles(ms []retracetest.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Role)
	}
	return out
}

func historyRoles(ms []session.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Role)
	}
	return out
}

// The failed assistant message is popped before the retry: the retried
// request does not contain it.
func TestFailedMessagePoppedBeforeRetry(t *testing.T) {
	f := start(t, retracetest.Sequence(retracetest.ServerError(503), retracetest.ServerError(502), retracetest.OK()), nil)
	f.s.Append(session.Message{Role: session.User, Content: "earlier"}, session.Message{Role: session.Assistant, Content: "earlier answer", StopReason: session.StopEnd})

	_, err := f.s.Run(context.Background(), "now")
	require.NoError(t, err)

	got := f.srv.Received()
	require.Len(t, got, 3)
	for i, r := range got {
		assert.Equal(t, []string{"system", "user", "assistant", "user"}, roles(r.Messages), "request %d", i)
		assert.Equal(t, "now", r.Messages[3].Content)
	}
	assert.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second}, f.clk.Slept())
	h := f.s.History()
	assert.Equal(t, []string{"user", "assistant", "user", "assistant"}, historyRoles(h))
	for _, m := range h {
		assert.NotEqual(t, session.StopError, m.StopReason)
	}
	attempts := 0
	for _, s := range f.rec.Ended() {
		if _, ok := attr(s, telemetry.Attempt); ok && s.Name() == "session attempt" {
			attempts++
		}
	}
	assert.Equal(t, 3, attempts)
}

// A stream that ends without a finish reason, cleanly or by a reset, is the
// dropped stream: an error with an empty message, retried.
func TestDroppedStreamRetried(t *testing.T) {
	for name, drop := range map[string]retracetest.Fault{
		"clean end before [DONE]": retracetest.StreamEOF(2),
		"connection reset":        retracetest.StreamReset(2),
	} {
		t.Run(name, func(t *testing.T) {
			f := start(t, retracetest.Sequence(drop, retracetest.OK()), nil)
			msg, err := f.s.Run(context.Background(), "hi")
			require.NoError(t, err)
			assert.Equal(t, retracetest.DefaultReply, msg.Content)
			assert.Equal(t, 2, f.srv.Requests())
			attempt := f.rec.Ended()[1] // the first session attempt ended second, after its model span
			assert.Equal(t, "transient", v(attempt, telemetry.ErrorClass))
		})
		t.Run(name+", always", func(t *testing.T) {
			f := start(t, retracetest.Always(drop), nil)
			msg, err := f.s.Run(context.Background(), "hi")
			require.Error(t, err)
			assert.Equal(t, 4, f.srv.Requests())
			assert.Equal(t, session.StopError, msg.StopReason)
			assert.Equal(t, "", msg.ErrorMessage, "a dropped stream has no message")
			se, ok := errors.AsType[*policies.Error](err)
			require.True(t, ok)
			assert.Equal(t, "stream_dropped", se.Type)
			assert.Empty(t, f.s.History(), "a failed Run leaves the history as it was")
		})
	}
}

func TestContextOverflowCompacts(t *testing.T) {
	f := start(t, retracetest.Sequence(retracetest.ContextOverflow(), retracetest.OK()), nil)
	for i := range 4 {
		f.s.Append(session.Message{Role: session.User, Content: "old question"}, session.Message{Role: session.Assistant, Content: "old answer " + string(rune('a'+i)), StopReason: session.StopEnd})
	}
	msg, err := f.s.Run(context.Background(), "latest")
	require.NoError(t, err)
	assert.Equal(t, retracetest.DefaultReply, msg.Content)
	got := f.srv.Received()
	require.Len(t, got, 2, "one overflow, one call after compaction: no transient retry")
	assert.Len(t, got[0].Messages, 1+8+1)
	assert.Len(t, got[1].Messages, 1+4+1, "the oldest half of the turns dropped")
	assert.Equal(t, "system", got[1].Messages[0].Role, "the system prompt is kept")
	assert.Equal(t, "latest", got[1].Messages[len(got[1].Messages)-1].Content, "the last user message is kept")
	assert.Empty(t, f.clk.Slept(), "compaction is not a backoff")
	sessions := f.spans("session")
	require.Len(t, sessions, 2)
	assert.Equal(t, "failed_permanent", v(sessions[0], telemetry.Outcome))
	assert.Equal(t, "context_overflow", v(sessions[0], telemetry.ErrorClass))
	assert.Equal(t, "success", v(sessions[1], telemetry.Outcome))
	assert.Empty(t, v(sessions[0], telemetry.ConversationCompacted))
	assert.Equal(t, "true", v(sessions[1], telemetry.ConversationCompacted), "the call after compaction says so")
	assert.Equal(t, `["error"]`, v(sessions[0], semconv.GenAIFinishReasons), "a failed inference ends in error")
	for _, m := range f.spans("model") {
		assert.Empty(t, v(m, telemetry.ConversationCompacted), "only the inference span carries it")
	}
}

func TestContextOverflowCannotCompact(t *testing.T) {
	f := start(t, retracetest.Always(retracetest.ContextOverflow()), nil)
	_, err := f.s.Run(context.Background(), "a very long prompt")
	require.ErrorIs(t, err, session.ErrCannotCompact)
	assert.Equal(t, 1, f.srv.Requests())
}

func TestRetryAfterHonoured(t *testing.T) {
	f := start(t, retracetest.Sequence(retracetest.RateLimited(5*time.Second), retracetest.OK()), nil)
	_, err := f.s.Run(context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{5 * time.Second}, f.clk.Slept(), "Retry-After 5 s outweighs the 2 s backoff")

	inMs := retracetest.RateLimited(2500 * time.Millisecond)
	inMs.Header = http.Header{"Retry-After-Ms": {"2500"}} // OpenAI's hint in milliseconds, without Retry-After
	g := start(t, retracetest.Sequence(inMs, retracetest.OK()), nil)
	_, err = g.s.Run(context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{2500 * time.Millisecond}, g.clk.Slept())
}

func TestPermanentAndFatalNotRetried(t *testing.T) {
	for _, tt := range []struct {
		fault retracetest.Fault
		class policies.Class
		text  string
	}{
		{retracetest.InvalidAPIKey(), policies.Permanent, "APIError: 401 invalid_api_key: Incorrect API key provided: sk-[REDACTED]"},
		{retracetest.InsufficientQuota(), policies.Fatal, "APIError: 429 insufficient_quota: You exceeded your current quota"},
		{retracetest.InvalidImage(), policies.Permanent, "APIError: 400 invalid_image: Invalid image"},
	} {
		t.Run(tt.fault.String(), func(t *testing.T) {
			f := start(t, retracetest.Always(tt.fault), nil)
			msg, err := f.s.Run(context.Background(), "hi")
			require.Error(t, err)
			assert.Equal(t, 1, f.srv.Requests())
			assert.Equal(t, tt.class, policies.Classify(err).Class)
			assert.True(t, strings.HasPrefix(msg.ErrorMessage, tt.text), msg.ErrorMessage)
			assert.NotContains(t, err.Error(), "sk-test")
		})
	}
}

// Bad input from the provider is a classified error, never a panic.
func TestMalformedProviderAnswers(t *testing.T) {
	for name, fault := range map[string]retracetest.Fault{
		"malformed SSE event": retracetest.Malformed(),
		"not JSON":            retracetest.BadJSON(),
	} {
		t.Run(name, func(t *testing.T) {
			f := start(t, retracetest.Always(fault), func(c *session.Config) { c.Retry = policies.RetryConfig{MaxAttempts: 1} })
			_, err := f.s.Run(context.Background(), "hi")
			require.Error(t, err)
			c := policies.Classify(err)
			assert.Equal(t, policies.Transient, c.Class)
			assert.Equal(t, "malformed_response", c.Type)
			assert.Contains(t, err.Error(), "malformed response from the provider")
		})
	}
}

// A provider that never answers is cut by the attempt timeout.
func TestHangCutByAttemptTimeout(t *testing.T) {
	arrived := make(chan struct{}, 1)
	clk := clock.NewFake(epoch)
	f := start(t, func(n int, _ retracetest.Request) retracetest.Fault {
		arrived <- struct{}{}
		return retracetest.Hang()
	}, func(c *session.Config) {
		c.Retry = policies.RetryConfig{MaxAttempts: 1}
		c.ModelTimeout = 30 * time.Second
		c.Options = append(c.Options, middleware.WithClock(clk))
	})
	done := make(chan error, 1)
	go func() {
		_, err := f.s.Run(context.Background(), "hi")
		done <- err
	}()
	<-arrived
	clk.Advance(30 * time.Second)
	err := <-done
	require.ErrorIs(t, err, timeout.ErrExceeded)
	te, ok := errors.AsType[*policies.Error](err)
	require.True(t, ok)
	assert.Contains(t, te.Error(), "attempt timed out after 30s")
	assert.Equal(t, policies.Transient, policies.Classify(err).Class)
	model := f.spans("model")
	require.Len(t, model, 1)
	assert.Equal(t, "attempt_timeout", v(model[0], semconv.ErrorType))
}

func TestNewValidates(t *testing.T) {
	_, err := session.New(session.Config{Model: "m"})
	assert.Error(t, err)
	_, err = session.New(session.Config{Provider: session.NewOpenAI(session.OpenAIConfig{})})
	assert.Error(t, err)
}

func TestDropOldest(t *testing.T) {
	sys := session.Message{Role: session.System, Content: "s"}
	u := func(c string) session.Message { return session.Message{Role: session.User, Content: c} }
	a := func(c string) session.Message { return session.Message{Role: session.Assistant, Content: c} }
	call := session.Message{Role: session.Assistant, ToolCalls: []session.ToolCall{{ID: "1", Name: "search"}}}
	result := session.Message{Role: session.ToolRole, ToolCallID: "1", Content: "r"}
	out, err := session.DropOldest(context.Background(), []session.Message{sys, u("1"), call, result, a("2"), u("3")})
	require.NoError(t, err)
	// Half of [u1, call, result, a2] is 2, rounded up to the whole turn u1 began.
	assert.Equal(t, []session.Message{sys, u("3")}, out)
	out, err = session.DropOldest(context.Background(), []session.Message{u("1"), a("1"), u("2"), a("2"), u("3"), a("3"), u("4")})
	require.NoError(t, err)
	assert.Equal(t, []session.Message{u("3"), a("3"), u("4")}, out, "no answer is kept without its question")
	_, err = session.DropOldest(context.Background(), []session.Message{sys, u("only")})
	assert.True(t, errors.Is(err, session.ErrCannotCompact))
}

// A turn that overflows again after compaction fails, and leaves the
// history as it was before the call: nothing lost, nothing half-compacted.
func TestOverflowAfterCompactionRestoresHistory(t *testing.T) {
	f := start(t, retracetest.Always(retracetest.ContextOverflow()), nil)
	for i := range 4 {
		f.s.Append(session.Message{Role: session.User, Content: "q"}, session.Message{Role: session.Assistant, Content: "a" + string(rune('0'+i)), StopReason: session.StopEnd})
	}
	before := f.s.History()
	msg, err := f.s.Run(context.Background(), "latest")
	require.Error(t, err)
	assert.Equal(t, session.StopError, msg.StopReason)
	assert.Equal(t, 2, f.srv.Requests(), "one call, then one after compaction")
	assert.Equal(t, before, f.s.History())
}

// One failure is classified once: the session's layer takes the class its
// model layer gave the provider's error, and never classifies the turn's
// error around it (whose words are the history's, not the provider's).
func TestOneFailureClassifiedOnce(t *testing.T) {
	var all int
	rules := policies.NewClassifier(func(err error) (policies.Classification, bool) {
		all++
		return policies.Classification{}, false
	})
	f := start(t, retracetest.Always(retracetest.ServerError(503)), func(c *session.Config) {
		c.Options = append(c.Options, middleware.WithClassifier(rules))
	})
	_, err := f.s.Run(context.Background(), "hi")
	require.Error(t, err)
	require.Equal(t, 4, f.srv.Requests(), "SessionRetry's attempts")
	assert.Equal(t, 4, all, "each failed request is classified once")
	inference := f.spans("session")
	require.Len(t, inference, 1)
	assert.Equal(t, string(policies.Transient), v(inference[0], telemetry.ErrorClass))
}
