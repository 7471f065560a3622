package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/tool"
)

const anthropicKey = "sk-ant-test-0123456789abcdefghij"

// anthropicServer starts a fault server with script and returns it with the
// Anthropic provider against it: the real anthropic-sdk-go client over real
// HTTP, on a transport of its own that the test closes.
func anthropicServer(t *testing.T, script retracetest.Script, mod func(*session.AnthropicConfig)) (*retracetest.Server, *session.Anthropic) {
	t.Helper()
	srv := retracetest.New(script)
	require.NoError(t, srv.Start())
	tr := &http.Transport{}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	cfg := session.AnthropicConfig{BaseURL: srv.AnthropicURL(), APIKey: anthropicKey, HTTPClient: &http.Client{Transport: tr}}
	if mod != nil {
		mod(&cfg)
	}
	return srv, session.NewAnthropic(cfg)
}

// startAnthropic is start with the Anthropic provider.
func startAnthropic(t *testing.T, script retracetest.Script, mod func(*session.Config)) *fixture {
	t.Helper()
	srv, p := anthropicServer(t, script, nil)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	clk := clock.NewVirtual(epoch)
	cfg := session.Config{
		Provider: p,
		Model:    "claude-test",
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

func TestAnthropicStreamingText(t *testing.T) {
	var deltas []string
	f := startAnthropic(t, retracetest.Always(retracetest.Reply("All systems nominal.")), func(c *session.Config) {
		c.OnDelta = func(d session.Delta) { deltas = append(deltas, d.Text) }
	})
	msg, err := f.s.Run(context.Background(), "status?")
	require.NoError(t, err)
	assert.Equal(t, "All systems nominal.", msg.Content)
	assert.Equal(t, session.StopEnd, msg.StopReason)
	assert.Equal(t, []string{"All", " systems", " nominal."}, deltas)
	assert.Equal(t, session.Usage{InputTokens: 4, OutputTokens: 3}, msg.Usage, "the system prompt's and the prompt's words in, the reply's out")

	model := f.spans("session") // the inference span covers the session's retries
	require.Len(t, model, 1)
	assert.Equal(t, "chat claude-test", model[0].Name())
	assert.Equal(t, "anthropic", v(model[0], semconv.GenAIProvider))
	assert.Equal(t, "chat", v(model[0], semconv.GenAIOperation))
	assert.Equal(t, "claude-test", v(model[0], semconv.GenAIRequestModel))
	assert.Equal(t, "claude-test", v(model[0], semconv.GenAIResponseModel))
	assert.Equal(t, "4", v(model[0], semconv.GenAIInputTokens))
	assert.Equal(t, "3", v(model[0], semconv.GenAIOutputTokens))
	assert.Equal(t, `["stop"]`, v(model[0], semconv.GenAIFinishReasons))

	got := f.srv.Received()
	require.Len(t, got, 1)
	assert.Equal(t, "/v1/messages", got[0].Path)
	assert.True(t, got[0].Stream)
	assert.Equal(t, []retracetest.Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "status?"}}, got[0].Messages)
	assert.Equal(t, "Bearer ***ghij", got[0].Header.Get("Authorization"), "the key was sent (masked in the server's log)")
	var body struct {
		MaxTokens int `json:"max_tokens"`
	}
	require.NoError(t, json.Unmarshal(got[0].Body, &body))
	assert.Equal(t, session.DefaultAnthropicMaxTokens, body.MaxTokens)
	for _, s := range f.rec.Ended() {
		for _, kv := range s.Attributes() {
			assert.NotContains(t, kv.Value.String(), "0123456789abcdefghij", "the API key reached a span")
		}
	}
}

// A tool call and its result make the round trip: the model asks for a
// tool, the tool's answer goes back as a tool_result, the model answers.
func TestAnthropicToolUseRoundTrip(t *testing.T) {
	script := func(_ int, req retracetest.Request) retracetest.Fault {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return retracetest.Reply("The docs say: " + last.Content)
		}
		return retracetest.CallTools(retracetest.ToolCall{Name: "search_docs", Arguments: `{"query":"retry budget"}`})
	}
	f := startAnthropic(t, script, func(c *session.Config) {
		c.Tools = []session.Tool{{Name: "search_docs", Description: "Search the docs.", Parameters: map[string]any{
			"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}, "required": []any{"query"},
		}}}
	})
	msg, err := f.s.Run(context.Background(), "what is a retry budget?")
	require.NoError(t, err)
	assert.Equal(t, session.StopToolCalls, msg.StopReason)
	assert.Empty(t, msg.Content)
	require.Equal(t, []session.ToolCall{{ID: "toolu_0_0", Name: "search_docs", Arguments: `{"query":"retry budget"}`}}, msg.ToolCalls)
	assert.Equal(t, 2, msg.Usage.OutputTokens, "the words of the arguments")

	f.s.Append(session.Message{Role: session.ToolRole, ToolCallID: "toolu_0_0", Name: "search_docs", Content: "a cap on retries per task"})
	msg, err = f.s.Continue(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "The docs say: a cap on retries per task", msg.Content)
	assert.Equal(t, session.StopEnd, msg.StopReason)

	got := f.srv.Received()
	require.Len(t, got, 2)
	assert.Equal(t, []string{"search_docs"}, got[0].Tools)
	assert.Equal(t, []retracetest.Message{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "what is a retry budget?"},
		{Role: "assistant", ToolCalls: []retracetest.ToolCall{{ID: "toolu_0_0", Type: "function", Name: "search_docs", Arguments: `{"query":"retry budget"}`}}},
		{Role: "tool", ToolCallID: "toolu_0_0", Content: "a cap on retries per task"},
	}, got[1].Messages)
	var body struct {
		Tools []struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			InputSchema map[string]any `json:"input_schema"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(got[1].Body, &body))
	require.Len(t, body.Tools, 1)
	assert.Equal(t, "Search the docs.", body.Tools[0].Description)
	assert.Equal(t, map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}, "required": []any{"query"}},
		body.Tools[0].InputSchema)
}

// The history maps onto Anthropic's turns: system messages to the system
// prompt, consecutive tool results into one user turn, arguments that are
// not a JSON object to {}.
func TestAnthropicRequestTurns(t *testing.T) {
	srv, p := anthropicServer(t, nil, func(c *session.AnthropicConfig) { c.MaxTokens = 99 })
	_, err := p.Stream(context.Background(), session.Request{Model: "claude-test", Messages: []session.Message{
		{Role: session.System, Content: "Be terse."},
		{Role: session.User, Content: "check both"},
		{Role: session.Assistant, Content: "On it.", ToolCalls: []session.ToolCall{
			{ID: "t1", Name: "a", Arguments: `{"x":1}`}, {ID: "t2", Name: "b", Arguments: `not json`},
		}},
		{Role: session.ToolRole, ToolCallID: "t1", Content: "one"},
		{Role: session.ToolRole, ToolCallID: "t2", Content: "invalid arguments"},
		{Role: session.User, Content: "and?"},
		{Role: session.Assistant}, // nothing to say: left out
	}}, nil)
	require.NoError(t, err)
	var body struct {
		MaxTokens int `json:"max_tokens"`
		System    []struct {
			Text string `json:"text"`
		} `json:"system"`
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string          `json:"type"`
				Input     json.RawMessage `json:"input"`
				ToolUseID string          `json:"tool_use_id"`
			} `json:"content"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(srv.Received()[0].Body, &body))
	assert.Equal(t, 99, body.MaxTokens)
	require.Len(t, body.System, 1)
	assert.Equal(t, "Be terse.", body.System[0].Text)
	require.Len(t, body.Messages, 3, "user, assistant, and one user turn of both results and the question")
	assert.Equal(t, []string{"user", "assistant", "user"}, []string{body.Messages[0].Role, body.Messages[1].Role, body.Messages[2].Role})
	a := body.Messages[1].Content
	require.Len(t, a, 3)
	assert.Equal(t, []string{"text", "tool_use", "tool_use"}, []string{a[0].Type, a[1].Type, a[2].Type})
	assert.JSONEq(t, `{"x":1}`, string(a[1].Input))
	assert.JSONEq(t, `{}`, string(a[2].Input))
	u := body.Messages[2].Content
	require.Len(t, u, 3)
	assert.Equal(t, []string{"tool_result", "tool_result", "text"}, []string{u[0].Type, u[1].Type, u[2].Type})
	assert.Equal(t, []string{"t1", "t2"}, []string{u[0].ToolUseID, u[1].ToolUseID})

	_, err = p.Stream(context.Background(), session.Request{Model: "claude-test", Messages: []session.Message{{Role: "robot", Content: "beep"}}}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `role "robot"`)
	assert.Equal(t, policies.Permanent, policies.Classify(err).Class)
	assert.Equal(t, 1, srv.Requests(), "a request that cannot be built is not sent")
}

// Each of Anthropic's error types has its class, as the API documents it.
func TestAnthropicErrorClasses(t *testing.T) {
	cases := []struct {
		name  string
		fault retracetest.Fault
		class policies.Class
		typ   string
	}{
		{"529 overloaded_error", retracetest.ServerError(529), policies.Transient, "overloaded_error"},
		{"500 api_error", retracetest.ServerError(500), policies.Transient, "api_error"},
		{"429 rate_limit_error", retracetest.RateLimited(7 * time.Second), policies.Transient, "rate_limit_error"},
		{"504 timeout_error", retracetest.Status(504, "", "timeout_error", "Request timed out"), policies.Transient, "timeout_error"},
		{"401 authentication_error", retracetest.InvalidAPIKey(), policies.Permanent, "authentication_error"},
		{"403 permission_error", retracetest.Status(403, "", "permission_error", "Your API key does not have permission to use the specified resource."), policies.Permanent, "permission_error"},
		{"404 not_found_error", retracetest.Status(404, "", "not_found_error", "model: claude-nope"), policies.Permanent, "not_found_error"},
		{"400 invalid_request_error", retracetest.Status(400, "", "invalid_request_error", "messages: roles must alternate"), policies.Permanent, "invalid_request_error"},
		{"402 billing_error", retracetest.InsufficientQuota(), policies.Fatal, "billing_error"},
		{"400 billing_error", retracetest.Status(400, "", "billing_error", "Your credit balance is too low"), policies.Fatal, "billing_error"},
		{"413 request_too_large", retracetest.RequestTooLarge(), policies.ContextOverflow, "request_too_large"},
		{"prompt is too long", retracetest.ContextOverflow(), policies.ContextOverflow, "invalid_request_error"},
		{"event: error overloaded_error", retracetest.ErrorEvent(2, "", "overloaded_error", "Overloaded"), policies.Transient, "overloaded_error"},
		{"event: error api_error", retracetest.ErrorEvent(0, "", "api_error", "Internal server error"), policies.Transient, "api_error"},
		{"event: error billing_error", retracetest.ErrorEvent(1, "", "billing_error", "Your credit balance is too low"), policies.Fatal, "billing_error"},
		{"event: error of an unknown type", retracetest.ErrorEvent(1, "", "mystery_error", "?"), policies.Transient, "stream_error"},
		{"malformed event", retracetest.Malformed(), policies.Transient, "malformed_response"},
		{"not an event stream", retracetest.BadJSON(), policies.Transient, "malformed_response"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, p := anthropicServer(t, retracetest.Always(tc.fault), nil)
			_, err := p.Stream(context.Background(), session.Request{Model: "claude-test", Messages: []session.Message{{Role: session.User, Content: "hi"}}}, nil)
			require.Error(t, err)
			c := policies.Classify(err)
			assert.Equal(t, tc.class, c.Class, "%v (%s)", err, c.Reason)
			assert.Equal(t, tc.typ, c.Type)
			assert.Equal(t, 1, srv.Requests(), "the SDK's retries are off")
			assert.NotContains(t, err.Error(), anthropicKey)
		})
	}
}

// A 429's retry-after reaches the classification, and the session waits it
// out instead of its own backoff.
func TestAnthropicRetryAfter(t *testing.T) {
	_, p := anthropicServer(t, retracetest.Always(retracetest.RateLimited(7*time.Second)), nil)
	_, err := p.Stream(context.Background(), session.Request{Model: "claude-test", Messages: []session.Message{{Role: session.User, Content: "hi"}}}, nil)
	var api *policies.Error
	require.ErrorAs(t, err, &api)
	assert.Equal(t, 429, api.StatusCode)
	assert.Equal(t, "rate_limit_error", api.Code)
	assert.Equal(t, 7*time.Second, policies.Classify(err).RetryAfter)

	f := startAnthropic(t, retracetest.Sequence(retracetest.RateLimited(5*time.Second), retracetest.OK()), nil)
	_, err = f.s.Run(context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{5 * time.Second}, f.clk.Slept(), "retry-after 5 s outweighs the 2 s backoff")
	assert.Equal(t, 2, f.srv.Requests())
}

// The mid-stream error event fails the call with the error's class; the
// session retries a transient one, and the text streamed before it is not
// the answer.
func TestAnthropicMidStreamErrorRetried(t *testing.T) {
	var deltas []string
	f := startAnthropic(t, retracetest.Sequence(
		retracetest.ErrorEvent(2, "", "overloaded_error", "Overloaded").WithReply("partial answer here"),
		retracetest.Reply("Whole answer."),
	), func(c *session.Config) { c.OnDelta = func(d session.Delta) { deltas = append(deltas, d.Text) } })
	msg, err := f.s.Run(context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, "Whole answer.", msg.Content)
	assert.Equal(t, []string{"partial", " answer", "Whole", " answer."}, deltas, "the deltas streamed as they came")
	assert.Equal(t, 2, f.srv.Requests())
	model := f.spans("model")
	require.Len(t, model, 2)
	assert.Equal(t, "transient", v(model[0], telemetry.ErrorClass))
	assert.Equal(t, "overloaded_error", v(model[0], semconv.ErrorType))
}

// A stream that ends without message_stop (cleanly or by a reset) is the
// dropped stream: an error with an empty message, retried.
func TestAnthropicDroppedStream(t *testing.T) {
	for name, drop := range map[string]retracetest.Fault{
		"clean end before message_stop": retracetest.StreamEOF(2),
		"every delta, no message_stop":  retracetest.StreamEOF(99),
		"connection reset":              retracetest.StreamReset(2),
	} {
		t.Run(name, func(t *testing.T) {
			_, p := anthropicServer(t, retracetest.Always(drop), nil)
			_, err := p.Stream(context.Background(), session.Request{Model: "claude-test", Messages: []session.Message{{Role: session.User, Content: "hi"}}}, nil)
			var se *policies.Error
			require.ErrorAs(t, err, &se)
			assert.Empty(t, se.Message)
			assert.Equal(t, policies.Transient, policies.Classify(err).Class)
			if name != "connection reset" { // the two StreamEOFs: the body ended cleanly
				assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
			}

			f := startAnthropic(t, retracetest.Always(drop), nil)
			msg, err := f.s.Run(context.Background(), "hi")
			require.Error(t, err)
			assert.Equal(t, 4, f.srv.Requests(), "retried as the session retries a dropped stream")
			assert.Equal(t, session.StopError, msg.StopReason)
			assert.Equal(t, "", msg.ErrorMessage, "a dropped stream has no message")
		})
	}
	f := startAnthropic(t, retracetest.Sequence(retracetest.StreamEOF(1), retracetest.OK()), nil)
	msg, err := f.s.Run(context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, retracetest.DefaultReply, msg.Content)
	assert.Equal(t, 2, f.srv.Requests())
}

// Billing is fatal and a wrong key permanent: one request each.
func TestAnthropicPermanentAndFatalNotRetried(t *testing.T) {
	for _, tt := range []struct {
		fault retracetest.Fault
		class policies.Class
		text  string
	}{
		{retracetest.InvalidAPIKey(), policies.Permanent, "APIError: 401 authentication_error: invalid x-api-key"},
		{retracetest.InsufficientQuota(), policies.Fatal, "APIError: 402 billing_error: Your credit balance is too low"},
	} {
		t.Run(tt.fault.String(), func(t *testing.T) {
			f := startAnthropic(t, retracetest.Always(tt.fault), nil)
			msg, err := f.s.Run(context.Background(), "hi")
			require.Error(t, err)
			assert.Equal(t, 1, f.srv.Requests())
			assert.Equal(t, tt.class, policies.Classify(err).Class)
			assert.True(t, strings.HasPrefix(msg.ErrorMessage, tt.text), msg.ErrorMessage)
		})
	}
}

// The configured key is redacted by its exact value: echoed back in an
// error body or an error event, it reaches no error, no span and not the
// history.
func TestAnthropicKeyNeverLeaks(t *testing.T) {
	const key = "Zq7xW2.tenant.91" // in no shape a pattern knows: only its exact value can redact it
	for name, fault := range map[string]retracetest.Fault{
		"error body":  retracetest.Status(401, "", "authentication_error", "invalid x-api-key: "+key),
		"error event": retracetest.ErrorEvent(1, "", "permission_error", "key "+key+" may not use this model"),
	} {
		t.Run(name, func(t *testing.T) {
			srv, p := anthropicServer(t, retracetest.Always(fault), func(c *session.AnthropicConfig) { c.APIKey = key })
			assert.Equal(t, []string{key}, p.Secrets())
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			s, err := session.New(session.Config{
				Provider: p, Model: "claude-test",
				Options: []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(clock.NewVirtual(epoch))},
			})
			require.NoError(t, err)
			msg, err := s.Run(context.Background(), "hi")
			require.Error(t, err)
			assert.Equal(t, 1, srv.Requests(), "permanent: not retried")
			assert.NotContains(t, err.Error(), key)
			assert.Contains(t, err.Error(), "[REDACTED]")
			assert.NotContains(t, msg.ErrorMessage, key)
			require.NotEmpty(t, rec.Ended())
			for _, sp := range rec.Ended() {
				assert.NotContains(t, sp.Status().Description, key, sp.Name())
				for _, kv := range sp.Attributes() {
					assert.NotContains(t, kv.Value.String(), key, "%s on %s", kv.Key, sp.Name())
				}
				for _, ev := range sp.Events() {
					for _, kv := range ev.Attributes {
						assert.NotContains(t, kv.Value.String(), key, "%s on an event of %s", kv.Key, sp.Name())
					}
				}
			}
		})
	}
}

// The limits hold on the Anthropic provider too: an event that never ends
// is cut at MaxEventBytes, an error body at MaxErrorBodyBytes.
func TestAnthropicLimits(t *testing.T) {
	srv, p := anthropicServer(t, retracetest.Always(retracetest.HugeEvent(1<<20, 0)), func(c *session.AnthropicConfig) {
		c.Limits = session.Limits{MaxEventBytes: 4 << 10}
	})
	_, err := p.Stream(context.Background(), session.Request{Model: "claude-test", Messages: []session.Message{{Role: session.User, Content: "hi"}}}, nil)
	le := requireLimit(t, err)
	assert.Equal(t, "limit MaxEventBytes", le.Reason)
	assert.Equal(t, policies.Permanent, policies.Classify(err).Class)
	assert.Contains(t, le.Message, "(4096 bytes)")

	srv.SetScript(retracetest.Always(retracetest.HugeError(529, 1<<20)))
	_, err = p.Stream(context.Background(), session.Request{Model: "claude-test", Messages: []session.Message{{Role: session.User, Content: "hi"}}}, nil)
	var api *policies.Error
	require.ErrorAs(t, err, &api)
	assert.Equal(t, 529, api.StatusCode)
	assert.Equal(t, policies.Transient, policies.Classify(err).Class)
}

// The caller's end ends a call that hangs, with the caller's error.
func TestAnthropicCanceled(t *testing.T) {
	arrived := make(chan struct{}, 1)
	_, p := anthropicServer(t, func(int, retracetest.Request) retracetest.Fault {
		arrived <- struct{}{}
		return retracetest.Hang()
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Stream(ctx, session.Request{Model: "claude-test", Messages: []session.Message{{Role: session.User, Content: "hi"}}}, nil)
		done <- err
	}()
	<-arrived
	cancel()
	err := <-done
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
	assert.Equal(t, policies.Canceled, policies.Classify(err).Class)
}

// With the SDK's retries back on and retrace's SDK middleware in
// AnthropicConfig.Middleware, each request of the SDK's loop is a CLIENT
// span, counted: provider requests = client spans = retrace.calls.
func TestAnthropicSDKRetriesSeen(t *testing.T) {
	overloaded := retracetest.ServerError(529)
	overloaded.Header = http.Header{"Retry-After-Ms": {"1"}} // the SDK retries at once
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	opts := []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(clock.NewVirtual(epoch))}
	srv, p := anthropicServer(t, retracetest.Sequence(overloaded, overloaded, retracetest.OK()), func(c *session.AnthropicConfig) {
		c.SDKRetries = 2
		c.Middleware = append(c.Middleware, middleware.SDK("anthropic-sdk-go", 2, opts...))
	})
	s, err := session.New(session.Config{Provider: p, Model: "claude-test", Options: opts})
	require.NoError(t, err)
	msg, err := s.Run(context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, retracetest.DefaultReply, msg.Content)
	assert.Equal(t, 3, srv.Requests(), "one model call, three requests of the SDK's loop")
	var clients int
	var calls int64 = -1
	for _, sp := range rec.Ended() {
		if sp.SpanKind() == trace.SpanKindClient && sp.Name() == "POST" {
			clients++
		}
		if !sp.Parent().IsValid() {
			x, _ := attr(sp, telemetry.Calls)
			calls = x.AsInt64()
		}
	}
	assert.Equal(t, 3, clients, "a client span per request")
	assert.Equal(t, int64(3), calls, "retrace.calls")
}

func ExampleNewAnthropic() {
	srv := retracetest.New(retracetest.Sequence(retracetest.ServerError(529), retracetest.Reply("All systems nominal.")))
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()

	s, err := session.New(session.Config{
		Provider: session.NewAnthropic(session.AnthropicConfig{
			BaseURL: srv.AnthropicURL(), APIKey: "sk-ant-example", HTTPClient: &http.Client{Transport: transport},
		}),
		Model: "claude-sonnet-4-5",
		Retry: policies.RetryConfig{MaxAttempts: 2}, // no backoff: retry at once
	})
	if err != nil {
		panic(err)
	}
	msg, err := s.Run(context.Background(), "status?")
	fmt.Println(msg.Content, err, srv.Requests())
	// Output: All systems nominal. <nil> 2
}

// Tool arguments the model garbled reach the tool as they were sent, so
// that the tool refuses them as invalid arguments, not as "{}".
func TestAnthropicGarbledToolArguments(t *testing.T) {
	_, p := anthropicServer(t, retracetest.Always(retracetest.CallTools(retracetest.ToolCall{Name: "search_docs", Arguments: `{"query": "pay`})), nil)
	msg, err := p.Stream(context.Background(), session.Request{Model: "claude-test", Messages: []session.Message{{Role: session.User, Content: "hi"}}}, nil)
	require.NoError(t, err)
	require.Len(t, msg.ToolCalls, 1)
	assert.Equal(t, `{"query": "pay`, msg.ToolCalls[0].Arguments)

	search := tool.New("search_docs", func(context.Context, struct{ Query string }) (string, error) { return "found", nil }, tool.Config{})
	res := search.Invoke(context.Background(), msg.ToolCalls[0].Arguments)
	require.NotNil(t, res.Failure)
	assert.Contains(t, res.Failure.Hint, "the arguments were not valid")
}

// A key the provider echoes in its answer's model and ID reaches neither
// the message returned nor the history that the next request and a
// checkpoint carry: the whole value is written as [REDACTED], as on the
// spans.
func TestAnthropicEchoedKeyStaysOutOfTheHistory(t *testing.T) {
	const key = "Zq7xW2.tenant.91" // in no shape a pattern knows: only its exact value can redact it
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range [][2]string{
			{"message_start", `{"type":"message_start","message":{"id":"msg_` + key + `","type":"message","role":"assistant","model":"` + key + `","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":0}}}`},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":1}}`},
			{"message_stop", `{"type":"message_stop"}`},
		} {
			_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev[0], ev[1])
		}
	}))
	tr := &http.Transport{}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	p := session.NewAnthropic(session.AnthropicConfig{BaseURL: srv.URL, APIKey: key, HTTPClient: &http.Client{Transport: tr}})
	s, err := session.New(session.Config{Provider: p, Model: "claude-test", Options: []middleware.Option{middleware.WithClock(clock.NewVirtual(epoch))}})
	require.NoError(t, err)

	msg, err := s.Run(context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, "hello", msg.Content)
	assert.Equal(t, "[REDACTED]", msg.Model)
	assert.Equal(t, "[REDACTED]", msg.ResponseID)
	for _, m := range s.History() {
		assert.NotContains(t, m.Model, key)
		assert.NotContains(t, m.ResponseID, key)
	}
	b, err := json.Marshal(s.History())
	require.NoError(t, err)
	assert.NotContains(t, string(b), key, "what a checkpoint of the history would hold")
}
