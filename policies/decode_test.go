package policies_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	. "github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
)

// The errors a user's own openai-go or anthropic-sdk-go client returns are
// classified as retrace's own provider classifies the same answer: the same
// class, error.type and Retry-After, with no rule of the user's.
func TestOwnClientErrorsClassifiedAsTheOwnProvider(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		fault retracetest.Fault
		class Class
		typ   string
		after time.Duration
	}{
		{"quota", retracetest.InsufficientQuota(), Fatal, "insufficient_quota", 0},
		{"rate limit", retracetest.RateLimited(5 * time.Second), Transient, "rate_limit_exceeded", 5 * time.Second},
		{"overflow", retracetest.ContextOverflow(), ContextOverflow, "context_length_exceeded", 0},
		{"invalid key", retracetest.InvalidAPIKey(), Permanent, "invalid_api_key", 0},
		{"503", retracetest.ServerError(503), Transient, "server_error", 0},
		{"error event", retracetest.ErrorEvent(1, "insufficient_quota", "insufficient_quota", "Quota."), Fatal, "insufficient_quota", 0},
		{"unknown error event", retracetest.ErrorEvent(1, "weird", "", "Odd.").WithBody(`{"error":{"message":"odd"}}`), Transient, "stream_error", 0},
	} {
		t.Run("openai/"+tc.name, func(t *testing.T) {
			srv := start(t, tc.fault)
			own := session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-test-key-0123456789"})
			_, ownErr := own.Stream(ctx, session.Request{Model: "gpt-4o-mini", Messages: []session.Message{{Role: session.User, Content: "hi"}}}, nil)
			require.Error(t, ownErr)

			client := openai.NewClient(option.WithBaseURL(srv.URL()), option.WithAPIKey("sk-test-key-0123456789"), option.WithMaxRetries(0))
			stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			})
			for stream.Next() {
			}
			userErr := fmt.Errorf("my agent: %w", stream.Err())
			_ = stream.Close()
			require.Error(t, stream.Err())

			want, got := Classify(ownErr), Classify(userErr)
			assert.Equal(t, tc.class, want.Class, want.Reason)
			assert.Equal(t, tc.typ, want.Type)
			assert.Equal(t, tc.after, want.RetryAfter)
			assert.Equal(t, want.Class, got.Class, got.Reason)
			assert.Equal(t, want.Type, got.Type)
			assert.Equal(t, want.RetryAfter, got.RetryAfter)
		})
	}
	for _, tc := range []struct {
		name  string
		fault retracetest.Fault
		class Class
		typ   string
		after time.Duration
	}{
		{"billing", retracetest.InsufficientQuota(), Fatal, "billing_error", 0},
		{"overloaded", retracetest.ServerError(529), Transient, "overloaded_error", 0},
		{"rate limit", retracetest.RateLimited(7 * time.Second), Transient, "rate_limit_error", 7 * time.Second},
		{"prompt too long", retracetest.ContextOverflow(), ContextOverflow, "invalid_request_error", 0},
		{"too large", retracetest.RequestTooLarge(), ContextOverflow, "request_too_large", 0},
		{"authentication", retracetest.InvalidAPIKey(), Permanent, "authentication_error", 0},
		{"error event", retracetest.ErrorEvent(1, "", "overloaded_error", "Overloaded"), Transient, "overloaded_error", 0},
	} {
		t.Run("anthropic/"+tc.name, func(t *testing.T) {
			srv := start(t, tc.fault)
			own := session.NewAnthropic(session.AnthropicConfig{BaseURL: srv.AnthropicURL(), APIKey: "sk-ant-test-0123456789"})
			_, ownErr := own.Stream(ctx, session.Request{Model: "claude-sonnet-4-5", Messages: []session.Message{{Role: session.User, Content: "hi"}}}, nil)
			require.Error(t, ownErr)

			client := anthropic.NewClient(aoption.WithBaseURL(srv.AnthropicURL()), aoption.WithAPIKey("sk-ant-test-0123456789"), aoption.WithMaxRetries(0))
			stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
				Model: "claude-sonnet-4-5", MaxTokens: 64, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
			})
			for stream.Next() {
			}
			userErr := stream.Err()
			_ = stream.Close()
			require.Error(t, userErr)

			want, got := Classify(ownErr), Classify(userErr)
			assert.Equal(t, tc.class, want.Class, want.Reason)
			assert.Equal(t, tc.typ, want.Type)
			assert.Equal(t, tc.after, want.RetryAfter)
			assert.Equal(t, want.Class, got.Class, got.Reason)
			assert.Equal(t, want.Type, got.Type)
			assert.Equal(t, want.RetryAfter, got.RetryAfter)
		})
	}
}

func start(t *testing.T, f retracetest.Fault) *retracetest.Server {
	t.Helper()
	srv := retracetest.New(retracetest.Always(f))
	require.NoError(t, srv.Start())
	t.Cleanup(srv.Close)
	return srv
}

// The shapes of go-openai's errors (which eino-ext copies into a type of
// its own that does not unwrap) and of Google genai's (genkit's googlegenai
// plugin), as those packages declare them: the core recognises them by
// their fields, without importing them.
type goOpenAIError struct {
	Code           any
	Message        string
	Param          *string
	Type           string
	HTTPStatus     string
	HTTPStatusCode int
}

func (e *goOpenAIError) Error() string { return "error, status code: " + e.HTTPStatus }

type goOpenAIRequestError struct {
	HTTPStatus     string
	HTTPStatusCode int
	Err            error
	Body           []byte
}

func (e *goOpenAIRequestError) Error() string { return "request error" }
func (e *goOpenAIRequestError) Unwrap() error { return e.Err }

type genaiError struct {
	Code    int
	Message string
	Status  string
	Details []map[string]any
}

func (e genaiError) Error() string { return "genai error" }

func TestErrorShapesDecoded(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want *Error // nil: not a provider's answer
	}{
		{"go-openai quota", &goOpenAIError{Code: "insufficient_quota", Message: "Quota.", Type: "insufficient_quota", HTTPStatusCode: 429},
			&Error{StatusCode: 429, Code: "insufficient_quota", Message: "Quota."}},
		{"go-openai without a code", &goOpenAIError{Message: "Bad.", Type: "invalid_request_error", HTTPStatusCode: 400},
			&Error{StatusCode: 400, Code: "invalid_request_error", Message: "Bad."}},
		{"go-openai numeric code", &goOpenAIError{Code: float64(529), Message: "Busy.", HTTPStatusCode: 529},
			&Error{StatusCode: 529, Code: "529", Message: "Busy."}},
		{"go-openai request error with a body", &goOpenAIRequestError{HTTPStatusCode: 402, Body: []byte(`{"error":{"code":"billing_error","message":"Pay."}}`)},
			&Error{StatusCode: 402, Code: "billing_error", Message: "Pay."}},
		{"go-openai request error of a refused connection", &goOpenAIRequestError{Err: errors.New("connection refused")}, nil},
		{"genai", genaiError{Code: 429, Message: "Resource exhausted.", Status: "RESOURCE_EXHAUSTED"},
			&Error{StatusCode: 429, Code: "RESOURCE_EXHAUSTED", Message: "Resource exhausted."}},
		{"a struct with a Code that is no status", genaiError{Code: 7, Message: "x", Status: "y"}, nil},
		{"plain", errors.New("plain"), nil},
		{"nil pointer", (*goOpenAIError)(nil), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := AsAnswer(fmt.Errorf("wrapped: %w", tc.err))
			if tc.want == nil {
				assert.False(t, ok, "%+v", got)
				return
			}
			require.True(t, ok)
			assert.Equal(t, tc.want.StatusCode, got.StatusCode)
			assert.Equal(t, tc.want.Code, got.Code)
			assert.Equal(t, tc.want.Message, got.Message)
			assert.Equal(t, Classify(tc.want).Class, Classify(tc.err).Class)
			assert.Equal(t, Classify(tc.want).Type, Classify(tc.err).Type)
		})
	}
}

// A decoded message is bounded as an error body's is.
func TestDecodedMessageBounded(t *testing.T) {
	long := make([]byte, 10<<10)
	for i := range long {
		long[i] = 'x'
	}
	got, ok := AsAnswer(&goOpenAIError{Message: string(long), HTTPStatusCode: 500})
	require.True(t, ok)
	assert.LessOrEqual(t, len(got.Message), 1<<10)
}

// The Retry-After of an SDK's error is read from its response's headers.
func TestDecodedRetryAfter(t *testing.T) {
	resp := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"3"}}}
	err := &openai.Error{StatusCode: 429, Code: "rate_limit_exceeded", Response: resp}
	c := Classify(err)
	assert.Equal(t, Transient, c.Class)
	assert.Equal(t, 3*time.Second, c.RetryAfter)
}

// An error event that says nothing still reads as a provider's answer: its
// text is "api error", never empty, and a stream that failed without a
// word may answer the next time.
func TestEmptyErrorEventIsAnAnswer(t *testing.T) {
	e := ErrorEventFrom([]byte(`{}`))
	assert.Equal(t, "api error", e.Error())
	assert.Equal(t, Transient, Classify(e).Class)
}
