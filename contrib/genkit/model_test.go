package retracegenkit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/core/status"
	"github.com/firebase/genkit/go/genkit"
	gkmw "github.com/firebase/genkit/go/plugins/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	oteltrace "go.opentelemetry.io/otel/trace"

	retracegenkit "github.com/retrace-go/retrace/contrib/genkit"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
)

// collector is a streaming callback that keeps the text it is given.
type collector struct {
	mu     sync.Mutex
	text   strings.Builder
	chunks int
}

func (c *collector) callback(_ context.Context, ch *ai.ModelResponseChunk) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.chunks++
	c.text.WriteString(ch.Text())
	return nil
}

func (c *collector) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.text.String()
}

// stream runs one streamed Generate call with the given middleware.
func (s *stack) stream(ctx context.Context, cb ai.ModelStreamCallback, use ...ai.Middleware) (*ai.ModelResponse, error) {
	return genkit.Generate(ctx, s.g,
		ai.WithModelName("fault/gpt-test"),
		ai.WithPrompt("Why is the payment API answering 429?"),
		ai.WithUse(use...),
		ai.WithStreaming(cb),
	)
}

// layerSpans are the spans of a retrace layer, in the order they ended.
func layerSpans(spans []sdktrace.ReadOnlySpan, layer string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range spans {
		if l, _ := attr(sp, string(telemetry.Layer)); l == layer {
			out = append(out, sp)
		}
	}
	return out
}

// The model call is the inference span a Session makes: "chat {model}"
// (CLIENT, layer session) with the GenAI attributes of the request and of
// the answer, over one INTERNAL model span per attempt; the tool loop is
// "invoke_agent". The model and provider are genkit's, or Config's.
func TestInferenceSpan(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		cfg                   retracegenkit.Config
		span, model, provider string
		agent                 string
	}{
		{name: "genkit's names", span: "chat gpt-test", model: "gpt-test", provider: "fault", agent: "invoke_agent"},
		{name: "Config's names", cfg: retracegenkit.Config{Model: "gpt-4o", Provider: "openai", Agent: "triage"},
			span: "chat gpt-4o", model: "gpt-4o", provider: "openai", agent: "invoke_agent triage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, retracetest.FailFirst(1, retracetest.ServerError(503)), 0)
			tc.cfg.Options = s.opts
			var cb collector
			resp, err := s.stream(context.Background(), cb.callback, retracegenkit.New(tc.cfg))
			require.NoError(t, err)
			assert.Equal(t, retracetest.DefaultReply, resp.Text())
			spans := s.rec.Ended()
			require.NoError(t, s.srv.CheckCounts(spans))
			assert.Equal(t, 2, s.srv.Requests())

			chats := layerSpans(spans, "session")
			require.Len(t, chats, 1, "one inference span per model call")
			chat := chats[0]
			assert.Equal(t, tc.span, chat.Name())
			assert.Equal(t, oteltrace.SpanKindClient, chat.SpanKind())
			for k, want := range map[string]string{
				string(semconv.GenAIOperationNameKey):         "chat",
				string(semconv.GenAIRequestModelKey):          tc.model,
				string(semconv.GenAIProviderNameKey):          tc.provider,
				string(semconv.GenAIRequestStreamKey):         "true",
				string(telemetry.Outcome):                     string(telemetry.OutcomeSuccessAfterRetry),
				string(semconv.GenAIResponseFinishReasonsKey): `["stop"]`,
			} {
				got, _ := attr(chat, k)
				assert.Equal(t, want, got, k)
			}
			in, _ := attr(chat, string(semconv.GenAIUsageInputTokensKey))
			assert.NotContains(t, []string{"", "0"}, in, "the usage of the answer")

			models := layerSpans(spans, "model")
			require.Len(t, models, 2, "one model span per attempt")
			for _, sp := range models {
				assert.Equal(t, "model", sp.Name())
				assert.Equal(t, oteltrace.SpanKindInternal, sp.SpanKind())
				assert.Equal(t, chat.SpanContext().SpanID(), parentLayer(spans, sp).SpanContext().SpanID(), "each attempt beneath the inference span")
				_, op := attr(sp, string(semconv.GenAIOperationNameKey))
				assert.False(t, op, "a GenAI backend counts one operation per logical call")
			}

			agents := layerSpans(spans, "agent")
			require.Len(t, agents, 1)
			assert.Equal(t, tc.agent, agents[0].Name())
			op, _ := attr(agents[0], string(semconv.GenAIOperationNameKey))
			assert.Equal(t, "invoke_agent", op)
			provider, _ := attr(agents[0], string(semconv.GenAIProviderNameKey))
			assert.Equal(t, tc.provider, provider)
		})
	}
}

// parentLayer is the nearest retrace layer or attempt span above sp: the
// walk passes genkit's own spans.
func parentLayer(spans []sdktrace.ReadOnlySpan, sp sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	byID := map[oteltrace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	for p := byID[sp.Parent().SpanID()]; p != nil; p = byID[p.Parent().SpanID()] {
		if _, ok := attr(p, string(telemetry.Layer)); ok {
			return p
		}
	}
	return nil
}

// A stream cut after its first chunk is retried, and the user's callback
// sees the answer once: the chunks of the attempt that failed never reach
// it. With middleware.SDK the cut is its *policies.Error; without
// it, the read error of openai-go's stream, which the adapter reads as a
// dropped stream as retrace's own provider does.
func TestRetriedStreamDeliversItsTextOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault retracetest.Fault
		noSDK bool
	}{
		{"reset, middleware.SDK", retracetest.StreamReset(1), false},
		{"reset, no middleware.SDK", retracetest.StreamReset(1), true},
		{"no terminator, middleware.SDK", retracetest.StreamEOF(1), false},
		{"no terminator, no middleware.SDK", retracetest.StreamEOF(1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStackWith(t, retracetest.FailFirst(1, tc.fault), stackConfig{noSDK: tc.noSDK})
			var cb collector
			resp, err := s.stream(context.Background(), cb.callback, retracegenkit.New(retracegenkit.Config{Options: s.opts}))
			require.NoError(t, err)
			assert.Equal(t, 2, s.srv.Requests(), "the cut stream, then the whole answer")
			assert.Equal(t, retracetest.DefaultReply, resp.Text())
			assert.Equal(t, retracetest.DefaultReply, cb.String(), "the callback sees the answer once")
			assert.Equal(t, len(retracetest.ReplyChunks(retracetest.DefaultReply)), cb.chunks, "the answering attempt's chunks, each once")

			spans := s.rec.Ended()
			require.NoError(t, s.srv.CheckCounts(spans))
			chat := layerSpans(spans, "session")
			require.Len(t, chat, 1)
			outcome, _ := attr(chat[0], string(telemetry.Outcome))
			assert.Equal(t, string(telemetry.OutcomeSuccessAfterRetry), outcome)
			models := layerSpans(spans, "model")
			require.Len(t, models, 2)
			typ, _ := attr(models[0], string(semconv.ErrorTypeKey))
			assert.Equal(t, "stream_dropped", typ, "the first attempt dropped")
			class, _ := attr(models[0], string(telemetry.ErrorClass))
			assert.Equal(t, string(policies.Transient), class)
		})
	}
}

// A stream that always ends without its terminator fails as a dropped
// stream after the session's attempts, never as a short answer.
func TestMissingTerminatorIsNeverAnAnswer(t *testing.T) {
	s := newStackWith(t, retracetest.Always(retracetest.StreamEOF(1)), stackConfig{noSDK: true})
	var cb collector
	_, err := s.stream(context.Background(), cb.callback, retracegenkit.New(retracegenkit.Config{Options: s.opts}))
	require.Error(t, err)
	var fe *policies.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, telemetry.OutcomeFailedExhausted, fe.Outcome)
	assert.Equal(t, "stream_dropped", fe.Type)
	var se *policies.Error
	assert.ErrorAs(t, err, &se)
	assert.Equal(t, 4, s.srv.Requests())
	assert.Empty(t, cb.String(), "no attempt answered: nothing reached the callback")
	require.NoError(t, s.srv.CheckCounts(s.rec.Ended()))
}

// A spent quota is one request, failed_fatal, whatever genkit's Retry
// around retrace's middleware does: the error the inference layer returns
// carries FAILED_PRECONDITION, which Retry does not retry, and still
// unwraps to retrace's *policies.Error. Listed after retrace's
// middleware, genkit's Retry runs beneath its model hook and sees
// compat_oai's own error, RESOURCE_EXHAUSTED, before retrace does: it
// resends it MaxRetries times, then the inference layer stops at once.
func TestQuotaIsFatal(t *testing.T) {
	retry := func() *gkmw.Retry {
		return &gkmw.Retry{MaxRetries: 2, InitialDelayMs: 1, MaxDelayMs: 1, NoJitter: true}
	}
	for _, tc := range []struct {
		name     string
		use      func(rt ai.Middleware) []ai.Middleware
		stream   bool
		requests int
	}{
		{"retrace alone", func(rt ai.Middleware) []ai.Middleware { return []ai.Middleware{rt} }, false, 1},
		{"retrace alone, streamed", func(rt ai.Middleware) []ai.Middleware { return []ai.Middleware{rt} }, true, 1},
		{"genkit Retry before retrace", func(rt ai.Middleware) []ai.Middleware { return []ai.Middleware{retry(), rt} }, false, 1},
		{"genkit Retry before retrace, streamed", func(rt ai.Middleware) []ai.Middleware { return []ai.Middleware{retry(), rt} }, true, 1},
		// Beneath retrace's hook genkit's Retry decides on compat_oai's
		// status and calls again; its resends of a spent quota are not sent
		// (middleware.SDK refuses them beneath a declared inner loop).
		{"genkit Retry after retrace", func(rt ai.Middleware) []ai.Middleware { return []ai.Middleware{rt, retry()} }, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, retracetest.Always(retracetest.InsufficientQuota()), 0)
			use := tc.use(retracegenkit.New(retracegenkit.Config{Options: s.opts}))
			var err error
			if tc.stream {
				var cb collector
				_, err = s.stream(context.Background(), cb.callback, use...)
			} else {
				_, err = s.generate(context.Background(), use)
			}
			require.Error(t, err)
			assert.Equal(t, tc.requests, s.srv.Requests())

			var fe *policies.Error
			require.ErrorAs(t, err, &fe, "retrace's error, through genkit's status error")
			assert.Equal(t, telemetry.OutcomeFailedFatal, fe.Outcome)
			assert.Equal(t, policies.Fatal, fe.Class)
			assert.Equal(t, 1, fe.Attempts)
			assert.Equal(t, status.FailedPrecondition, status.Of(err), "a status genkit's Retry and Fallback leave alone")

			spans := s.rec.Ended()
			require.NoError(t, s.srv.CheckCounts(spans))
			chats := layerSpans(spans, "session")
			require.Len(t, chats, 1, "one inference layer call")
			outcome, _ := attr(chats[0], string(telemetry.Outcome))
			assert.Equal(t, string(telemetry.OutcomeFailedFatal), outcome)
		})
	}
}

// What retrace retries keeps the provider's status, which genkit may
// retry; what it does not keeps a status genkit does not retry: the
// provider's own when it says so (401: UNAUTHENTICATED), else one by class.
func TestStatusOfTheFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fault  retracetest.Fault
		status status.Name
		class  policies.Class
	}{
		{"outage", retracetest.ServerError(503), status.Unavailable, policies.Transient},
		{"quota", retracetest.InsufficientQuota(), status.FailedPrecondition, policies.Fatal},
		{"invalid key", retracetest.InvalidAPIKey(), status.Unauthenticated, policies.Permanent},
		{"context overflow", retracetest.ContextOverflow(), status.InvalidArgument, policies.ContextOverflow},
		{"quota error event", retracetest.ErrorEvent(1, "insufficient_quota", "insufficient_quota", "You exceeded your current quota."), status.FailedPrecondition, policies.Fatal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, retracetest.Always(tc.fault), 0)
			var cb collector
			_, err := s.stream(context.Background(), cb.callback, retracegenkit.New(retracegenkit.Config{Options: s.opts}))
			require.Error(t, err)
			assert.Equal(t, tc.status, status.Of(err))
			var fe *policies.Error
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, tc.class, fe.Class)
		})
	}
}
