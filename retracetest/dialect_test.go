package retracetest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/retracetest"
)

// apiError is an error as one route's API says it. code is OpenAI's, sent
// as null when empty; Anthropic's errors have none.
type apiError struct {
	status             int
	code, typ, message string
}

// openAIBody is e's error object on OpenAI's route.
func (e apiError) openAIBody(t *testing.T) string {
	var code any
	if e.code != "" {
		code = e.code
	}
	b, err := json.Marshal(map[string]any{"error": map[string]any{"message": e.message, "type": e.typ, "param": nil, "code": code}})
	require.NoError(t, err)
	return string(b)
}

// anthropicBody is e's error object on the Messages route.
func (e apiError) anthropicBody(t *testing.T) string {
	require.Empty(t, e.code, "Anthropic's errors have no code")
	b, err := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": e.typ, "message": e.message}})
	require.NoError(t, err)
	return string(b)
}

// route is one of the server's APIs: how to post to it and how its error
// object reads.
type route struct {
	name string
	post func(t *testing.T, c *http.Client, srv *retracetest.Server, stream bool) *http.Response
	body func(apiError, *testing.T) string
}

var routes = []route{
	{"openai", func(t *testing.T, c *http.Client, srv *retracetest.Server, stream bool) *http.Response {
		return mustPost(t, c, srv.URL(), body(stream, stream))
	}, apiError.openAIBody},
	{"anthropic", func(t *testing.T, c *http.Client, srv *retracetest.Server, stream bool) *http.Response {
		return postMessages(t, c, srv, messagesBody(stream))
	}, apiError.anthropicBody},
}

// withHeader returns f with its headers replaced by h.
func withHeader(f retracetest.Fault, h http.Header) retracetest.Fault {
	f.Header = h
	return f
}

// Every error fault answers in the words of the route that serves it: its
// status, its error object exactly (code, type, message) and its retry
// headers, with or without a stream.
func TestErrorDialects(t *testing.T) {
	const (
		anthropicRateLimit = "This request would exceed the rate limit for your organization of 50 requests per minute. Please try again later."
		openAIKey          = "Incorrect API key provided: sk-test***...***abcd. You can find your API key at https://platform.openai.com/account/api-keys."
		openAIOverflow     = "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages."
		openAIQuota        = "You exceeded your current quota, please check your plan and billing details."
		anthropicBilling   = "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."
		invalidImage       = "Invalid image: image data is not a valid base64-encoded image."
		tooLarge           = "Request exceeds the maximum allowed number of bytes."
		forbidden          = "Your API key does not have permission to use the specified resource."
	)
	cases := []struct {
		name              string
		fault             retracetest.Fault
		openAI, anthropic apiError
		// retryAfter and retryAfterMs are the Retry-After and
		// retry-after-ms headers on both routes; "" is none.
		retryAfter, retryAfterMs string
	}{
		{"rate limited", retracetest.RateLimited(1500 * time.Millisecond),
			apiError{429, "rate_limit_exceeded", "requests", "Rate limit reached for requests. Please try again in 1.5s."},
			apiError{429, "", "rate_limit_error", anthropicRateLimit}, "2", ""},
		{"rate limited whole", retracetest.RateLimited(20 * time.Second),
			apiError{429, "rate_limit_exceeded", "requests", "Rate limit reached for requests. Please try again in 20s."},
			apiError{429, "", "rate_limit_error", anthropicRateLimit}, "20", ""},
		{"rate limited in ms", withHeader(retracetest.RateLimited(1500*time.Millisecond), http.Header{"Retry-After-Ms": {"1500"}}),
			apiError{429, "rate_limit_exceeded", "requests", "Rate limit reached for requests. Please try again in 1.5s."},
			apiError{429, "", "rate_limit_error", anthropicRateLimit}, "", "1500"},
		{"500", retracetest.ServerError(500),
			apiError{500, "server_error", "server_error", "The server had an error while processing your request."},
			apiError{500, "", "api_error", "Internal server error"}, "", ""},
		{"502", retracetest.ServerError(502),
			apiError{502, "server_error", "server_error", "Bad gateway"},
			apiError{502, "", "api_error", "Bad gateway"}, "", ""},
		{"503", retracetest.ServerError(503),
			apiError{503, "server_error", "server_error", "Service unavailable"},
			apiError{503, "", "api_error", "Service unavailable"}, "", ""},
		{"529", retracetest.ServerError(529),
			apiError{529, "overloaded_error", "overloaded_error", "Overloaded"},
			apiError{529, "", "overloaded_error", "Overloaded"}, "", ""},
		{"another 5xx", retracetest.ServerError(504),
			apiError{504, "server_error", "server_error", "Gateway Timeout"},
			apiError{504, "", "api_error", "Gateway Timeout"}, "", ""},
		{"invalid api key", retracetest.InvalidAPIKey(),
			apiError{401, "invalid_api_key", "invalid_request_error", openAIKey},
			apiError{401, "", "authentication_error", "invalid x-api-key"}, "", ""},
		{"context overflow", retracetest.ContextOverflow(),
			apiError{400, "context_length_exceeded", "invalid_request_error", openAIOverflow},
			apiError{400, "", "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"}, "", ""},
		{"insufficient quota", retracetest.InsufficientQuota(),
			apiError{429, "insufficient_quota", "insufficient_quota", openAIQuota},
			apiError{402, "", "billing_error", anthropicBilling}, "", ""},
		{"invalid image", retracetest.InvalidImage(),
			apiError{400, "invalid_image", "invalid_request_error", invalidImage},
			apiError{400, "", "invalid_request_error", invalidImage}, "", ""},
		{"request too large", retracetest.RequestTooLarge(),
			apiError{413, "request_too_large", "invalid_request_error", tooLarge},
			apiError{413, "", "request_too_large", tooLarge}, "", ""},
		// Status brings its own words; the Messages route finds their type.
		{"status of an Anthropic type", retracetest.Status(403, "", "permission_error", forbidden),
			apiError{403, "", "permission_error", forbidden},
			apiError{403, "", "permission_error", forbidden}, "", ""},
		{"status of a catalogued code", retracetest.Status(429, "insufficient_quota", "insufficient_quota", "Quota."),
			apiError{429, "insufficient_quota", "insufficient_quota", "Quota."},
			apiError{429, "", "billing_error", "Quota."}, "", ""},
		{"status of a type of its own", retracetest.Status(418, "", "teapot_error", "short and stout"),
			apiError{418, "", "teapot_error", "short and stout"},
			apiError{418, "", "teapot_error", "short and stout"}, "", ""},
		{"status of a code of its own", retracetest.Status(418, "teapot", "teapot_error", "I'm a teapot"),
			apiError{418, "teapot", "teapot_error", "I'm a teapot"},
			apiError{418, "", "invalid_request_error", "I'm a teapot"}, "", ""},
		{"status alone", retracetest.Status(504, "", "", "slow"),
			apiError{504, "", "", "slow"},
			apiError{504, "", "timeout_error", "slow"}, "", ""},
		{"status alone, unknown 5xx", retracetest.Status(507, "", "", "full"),
			apiError{507, "", "", "full"},
			apiError{507, "", "api_error", "full"}, "", ""},
	}
	for _, tc := range cases {
		for _, r := range routes {
			want := tc.openAI
			if r.name == "anthropic" {
				want = tc.anthropic
			}
			for _, stream := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/stream=%t", tc.name, r.name, stream), func(t *testing.T) {
					srv, c := start(t, retracetest.Always(tc.fault))
					resp := r.post(t, c, srv, stream)
					assert.Equal(t, want.status, resp.StatusCode)
					assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
					assert.Equal(t, tc.retryAfter, resp.Header.Get("Retry-After"))
					assert.Equal(t, tc.retryAfterMs, resp.Header.Get("Retry-After-Ms"))
					b, err := io.ReadAll(resp.Body)
					require.NoError(t, err)
					assert.JSONEq(t, r.body(want, t), string(b))
					assert.Equal(t, 1, srv.Requests())
				})
			}
		}
	}
}

// The mid-stream error event is each route's own: OpenAI's error object as
// the data of an unnamed event, Anthropic's "event: error" with its error
// object, after the deltas sent; without a stream, the error answer.
func TestErrorEventDialects(t *testing.T) {
	cases := []struct {
		name              string
		fault             retracetest.Fault
		openAI, anthropic string // the last event, as sent
	}{
		{"Anthropic's type", retracetest.ErrorEvent(1, "", "overloaded_error", "Overloaded"),
			`data: {"error":{"message":"Overloaded","type":"overloaded_error","param":null,"code":null}}` + "\n\n",
			`event: error` + "\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n"},
		{"a catalogued code", retracetest.ErrorEvent(1, "insufficient_quota", "insufficient_quota", "quota"),
			`data: {"error":{"message":"quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}` + "\n\n",
			`event: error` + "\n" + `data: {"type":"error","error":{"type":"billing_error","message":"quota"}}` + "\n\n"},
		{"a type of its own", retracetest.ErrorEvent(1, "", "mystery_error", "?"),
			`data: {"error":{"message":"?","type":"mystery_error","param":null,"code":null}}` + "\n\n",
			`event: error` + "\n" + `data: {"type":"error","error":{"type":"mystery_error","message":"?"}}` + "\n\n"},
		{"named, raw data", retracetest.ErrorEvent(1, "", "", "").WithEvent("failure").WithBody(`{"oops":true}`),
			"event: failure\ndata: {\"oops\":true}\n\n",
			"event: failure\ndata: {\"oops\":true}\n\n"},
	}
	for _, tc := range cases {
		for _, r := range routes {
			t.Run(tc.name+"/"+r.name, func(t *testing.T) {
				want := tc.openAI
				if r.name == "anthropic" {
					want = tc.anthropic
				}
				srv, c := start(t, retracetest.Always(tc.fault))
				resp := r.post(t, c, srv, true)
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err, "the stream ends cleanly after the error event")
				evs := strings.SplitAfter(string(b), "\n\n")
				require.GreaterOrEqual(t, len(evs), 2)
				assert.Equal(t, "", evs[len(evs)-1], "nothing after the last event")
				assert.Equal(t, want, evs[len(evs)-2])
				assert.Contains(t, evs[len(evs)-3], "Hello", "the one delta asked for came first")
			})
		}
	}
	t.Run("not a stream", func(t *testing.T) {
		for _, r := range routes {
			srv, c := start(t, retracetest.Always(retracetest.ErrorEvent(2, "", "overloaded_error", "Overloaded")))
			resp := r.post(t, c, srv, false)
			assert.Equal(t, http.StatusInternalServerError, resp.StatusCode, r.name)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.JSONEq(t, r.body(apiError{500, "", "overloaded_error", "Overloaded"}, t), string(b), r.name)
		}
	})
}

// A huge error body has the shape of the route's error object, with
// ServerError's type, and is exactly its size.
func TestHugeErrorDialects(t *testing.T) {
	for _, tc := range []struct {
		route  route
		prefix string
	}{
		{routes[0], `{"error":{"type":"overloaded_error","code":"overloaded_error","message":"xxx`},
		{routes[1], `{"type":"error","error":{"type":"overloaded_error","message":"xxx`},
	} {
		t.Run(tc.route.name, func(t *testing.T) {
			srv, c := start(t, retracetest.Always(retracetest.HugeError(529, 4096)))
			resp := tc.route.post(t, c, srv, true)
			assert.Equal(t, 529, resp.StatusCode)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Len(t, b, 4096)
			assert.True(t, strings.HasPrefix(string(b), tc.prefix), "%.80s", b)
			assert.True(t, json.Valid(b), "the filler is the message: the object is whole")
		})
	}
}
