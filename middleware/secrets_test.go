package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
)

// url.full holds no key or token the request's path or query names carry:
// a segment that is a key or an opaque token, a webhook's token, a query
// parameter named by a token; IDs, UUIDs, model names and dates are kept.
func TestRequestURLHoldsNoSecrets(t *testing.T) {
	for _, tt := range []struct{ name, path, want string }{
		{"a key in the path", "/v1/keys/sk-proj-AbCdEf1234567890/chat", "/v1/keys/REDACTED/chat"},
		{"an opaque token in the path", "/v1/keys/abcd1234efgh5678ijkl/rotate", "/v1/keys/REDACTED/rotate"},
		{"slack's webhook", "/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX", "/services/T00000000/B00000000/REDACTED"},
		{"slack's webhook, a real token", "/services/T0123ABCD/B0456EFGH/aB3dE5fG7hJ9kL1mN3pQ5rS7", "/services/T0123ABCD/B0456EFGH/REDACTED"},
		{"discord's webhook", "/api/webhooks/112233445566778899/TOKEN", "/api/webhooks/112233445566778899/REDACTED"},
		{"discord's webhook, its name kept", "/api/webhooks/112233445566778899/Zx9_Yw8-Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe/slack", "/api/webhooks/112233445566778899/REDACTED/slack"},
		{"an escaped segment", "/v1/secrets/api_key%3Dabcd1234/x", "/v1/secrets/REDACTED/x"},
		{"a query name that is a token", "/v1/chat?abcd1234efgh5678ijkl&model=gpt-4o", "/v1/chat?REDACTED=REDACTED&model=REDACTED"},
		{"a query name that is a key", "/v1/chat?sk-proj-AbCdEf1234567890=1", "/v1/chat?REDACTED=REDACTED"},

		{"object ids", "/v1/threads/thread_abc123DEF456ghi789/runs/run_abc123DEF456ghi789", "/v1/threads/thread_abc123DEF456ghi789/runs/run_abc123DEF456ghi789"},
		{"a completion's id", "/v1/chat/completions/chatcmpl-AbC123dEf456GhI789jKl012", "/v1/chat/completions/chatcmpl-AbC123dEf456GhI789jKl012"},
		{"a uuid", "/v1/requests/123e4567-e89b-12d3-a456-426614174000", "/v1/requests/123e4567-e89b-12d3-a456-426614174000"},
		{"a model and a dated version", "/2024-06-01/models/gpt-4o-mini-2024-07-18:generate?api-version=2024-06-01",
			"/2024-06-01/models/gpt-4o-mini-2024-07-18:generate?api-version=REDACTED"},
		{"services that are no webhook", "/v1/services/payments/refunds", "/v1/services/payments/refunds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newHTTPServer(t, httpAnswer{status: 200, body: "{}"})
			client, _, rec := httpClient(t, srv)
			resp, err := client.Get(srv.URL + tt.path)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			spans := requestSpans(rec)
			require.Len(t, spans, 1)
			full, _ := spanAttr(spans[0], "url.full")
			assert.Equal(t, srv.URL+tt.want, full.AsString())
		})
	}
}

// roundTripFunc is a base transport that fails every request as told.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A base transport's error is the request span's status: its text holds no
// secret query value, cookie or token, whatever names them.
func TestRequestErrorStatusHoldsNoSecrets(t *testing.T) {
	for _, tt := range []struct {
		name    string
		err     error
		secrets []string
		kept    string
	}{
		{"a url.Error's query", &url.Error{Op: "Get", URL: "https://api.example.com/v1/x?auth=a1s3cr3t&pwd=hunter2x&session=s355ion1&credential=cr3d1234&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20240101&jwt=eyJhbGciOi&page=2",
			Err: errors.New("dial tcp: connection refused")},
			[]string{"a1s3cr3t", "hunter2x", "s355ion1", "cr3d1234", "AKIAIOSFODNN7EXAMPLE", "eyJhbGciOi"}, "page=2"},
		{"a cookie header", errors.New("proxy: refused request with Cookie: session=c00k1e5ecret; theme=dark"),
			[]string{"c00k1e5ecret"}, "Cookie: session=[REDACTED]"},
		{"a set-cookie header", errors.New(`upstream said "Set-Cookie: sid=5et5ecret99; Path=/"`),
			[]string{"5et5ecret99"}, "Path=/"},
		{"a token after its word", errors.New("invalid bearer credential tok_live_51HabcdEFGH123"),
			[]string{"tok_live_51HabcdEFGH123"}, "invalid bearer credential [REDACTED]"},
		{"a webhook's path", &url.Error{Op: "Post", URL: "https://hooks.slack.com/services/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", Err: errors.New("EOF")},
			[]string{"aB3dE5fG7hJ9kL1mN3pQ5rS7"}, "hooks.slack.com/services/T0123ABCD/B0456EFGH/"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec, tp := recorder(t)
			base := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, tt.err })
			client := &http.Client{Transport: middleware.Transport(base, "http", tp)}
			resp, err := client.Get("https://api.example.com/v1/x")
			if resp != nil {
				_ = resp.Body.Close()
			}
			require.Error(t, err)
			spans := requestSpans(rec)
			require.NotEmpty(t, spans)
			for _, s := range rec.Ended() {
				for _, secret := range tt.secrets {
					assert.NotContains(t, s.Status().Description, secret, s.Name())
				}
			}
			assert.Contains(t, spans[0].Status().Description, tt.kept, "what failed is still said")
		})
	}
}

// The attributes the inference span takes from the answer at its end
// (gen_ai.response.model, gen_ai.response.id, the finish reasons) are the
// provider's words: one that echoes the call's key, or holds a secret's
// pattern, is written as [REDACTED]; the others as they are.
func TestEndAttributesHoldNoSecrets(t *testing.T) {
	const key = "Zq7xW2.tenant.91" // in no shape a pattern knows: only its exact value can redact it
	const r = "[REDACTED]"
	for _, tt := range []struct {
		name              string
		known             bool // the call's context knows the key
		model, id, reason string
		want              [3]string
	}{
		{"the known key as the model", true, key, "msg_01abc", "end_turn", [3]string{r, "msg_01abc", "end_turn"}},
		{"the known key in the id", true, "claude-test", "msg_" + key, "end_turn", [3]string{"claude-test", r, "end_turn"}},
		{"the known key as the stop reason", true, "claude-test", "msg_01abc", key, [3]string{"claude-test", "msg_01abc", r}},
		{"a key's pattern", false, "sk-ant-api03-AbCdEf1234567890", "Bearer eyJhbGciOiJIUzI1NiJ9", "end_turn", [3]string{r, r, "end_turn"}},
		{"nothing secret", false, "claude-3-5-sonnet-20241022", "msg_01XFDUDYJgAACzvnptvVoYEL", "end_turn",
			[3]string{"claude-3-5-sonnet-20241022", "msg_01XFDUDYJgAACzvnptvVoYEL", "end_turn"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			call := session.InferenceLayers[string](session.Inference[session.Message]{
				Provider: "anthropic", Model: "claude-test",
				Options:  []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(clock.NewVirtual(epoch))},
				Describe: func(m session.Message) session.Message { return m },
			})(func(context.Context, string) (session.Message, error) {
				return session.Message{Role: session.Assistant, Content: "hi", Model: tt.model, ResponseID: tt.id, StopReason: tt.reason}, nil
			})
			ctx := context.Background()
			if tt.known {
				ctx = policies.WithSecrets(ctx, key)
			}
			_, err := call(ctx, "hi")
			require.NoError(t, err)

			var chat sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.Name() == "chat claude-test" {
					chat = s
				}
			}
			require.NotNil(t, chat)
			model, _ := spanAttr(chat, semconv.GenAIResponseModel)
			id, _ := spanAttr(chat, semconv.GenAIResponseID)
			reasons, _ := spanAttr(chat, semconv.GenAIFinishReasons)
			require.Len(t, reasons.AsStringSlice(), 1)
			assert.Equal(t, tt.want, [3]string{model.AsString(), id.AsString(), reasons.AsStringSlice()[0]})
			for _, kv := range chat.Attributes() {
				assert.NotContains(t, kv.Value.String(), key, "%s", kv.Key)
				assert.NotContains(t, kv.Value.String(), "AbCdEf1234567890", "%s", kv.Key)
			}
		})
	}
}
