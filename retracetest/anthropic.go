package retracetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// AnthropicURL returns the base URL of the Anthropic-compatible API, such as
// http://127.0.0.1:PORT (the Messages API is at /v1/messages beneath it), or
// "" before Start.
func (s *Server) AnthropicURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String()
}

// AnthropicError returns an error answer with the given HTTP status and
// Anthropic error type, such as 529 and "overloaded_error".
func AnthropicError(status int, typ, message string) Fault {
	return Fault{kind: kindError, Status: status, Type: typ, Message: message}
}

// AnthropicOverloaded returns Anthropic's 529 overloaded_error.
func AnthropicOverloaded() Fault { return AnthropicError(529, "overloaded_error", "Overloaded") }

// AnthropicAPIError returns Anthropic's 500 api_error, an unexpected error
// on its side.
func AnthropicAPIError() Fault {
	return AnthropicError(http.StatusInternalServerError, "api_error", "Internal server error")
}

// AnthropicRateLimited returns Anthropic's 429 rate_limit_error with a
// retry-after header of retryAfter in whole seconds, rounded up.
func AnthropicRateLimited(retryAfter time.Duration) Fault {
	f := AnthropicError(http.StatusTooManyRequests, "rate_limit_error",
		"This request would exceed the rate limit for your organization of 50 requests per minute. Please try again later.")
	f.Header = http.Header{"Retry-After": {strconv.FormatInt(ceilDiv(retryAfter, time.Second), 10)}}
	return f
}

// AuthenticationError returns Anthropic's 401 authentication_error, a wrong
// API key.
func AuthenticationError() Fault {
	return AnthropicError(http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
}

// PermissionError returns Anthropic's 403 permission_error.
func PermissionError() Fault {
	return AnthropicError(http.StatusForbidden, "permission_error", "Your API key does not have permission to use the specified resource.")
}

// BillingError returns Anthropic's 402 billing_error: the account cannot
// pay, so nothing in the task can succeed.
func BillingError() Fault {
	return AnthropicError(http.StatusPaymentRequired, "billing_error",
		"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.")
}

// RequestTooLarge returns Anthropic's 413 request_too_large.
func RequestTooLarge() Fault {
	return AnthropicError(http.StatusRequestEntityTooLarge, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
}

// PromptTooLong returns Anthropic's 400 invalid_request_error for a prompt
// of tokens tokens over a context of maximum: "prompt is too long: N tokens >
// M maximum".
func PromptTooLong(tokens, maximum int) Fault {
	return AnthropicError(http.StatusBadRequest, "invalid_request_error",
		fmt.Sprintf("prompt is too long: %d tokens > %d maximum", tokens, maximum))
}

// AnthropicErrorEvent returns a 200 event stream that sends afterChunks
// deltas of the answer, then Anthropic's mid-stream error, "event: error"
// with {"type": "error", "error": {"type": typ, "message": message}}, and
// ends. A request with stream=false gets the error answer with status 500
// instead.
func AnthropicErrorEvent(afterChunks int, typ, message string) Fault {
	return Fault{kind: kindErrorEvent, Chunks: afterChunks, Type: typ, Message: message, Event: "error"}
}

// anthropicTypes are the error types of Anthropic's API, and the status each
// comes with.
var anthropicTypes = map[string]int{
	"invalid_request_error": http.StatusBadRequest,
	"authentication_error":  http.StatusUnauthorized,
	"billing_error":         http.StatusPaymentRequired,
	"permission_error":      http.StatusForbidden,
	"not_found_error":       http.StatusNotFound,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limit_error":      http.StatusTooManyRequests,
	"api_error":             http.StatusInternalServerError,
	"timeout_error":         http.StatusGatewayTimeout,
	"overloaded_error":      529,
}

// openAIToAnthropic are the error codes of the OpenAI-style constructors
// with the Anthropic error type that means the same, so that a script
// written for one protocol fails alike on the other.
var openAIToAnthropic = map[string]string{
	"insufficient_quota":      "billing_error",
	"invalid_api_key":         "authentication_error",
	"context_length_exceeded": "invalid_request_error",
	"rate_limit_exceeded":     "rate_limit_error",
	"server_error":            "api_error",
	"invalid_image":           "invalid_request_error",
}

// anthropicType is the Anthropic error type f answers with on the Messages
// route: the Anthropic type of its OpenAI code, else its Type or Code when
// that is one of Anthropic's, else the Type of a fault without a Code as it
// is (the Anthropic constructors set no Code), else the one of its status.
// The code comes first: OpenAI's faults name a generic type
// (invalid_request_error) beside the code that says what failed
// (invalid_api_key).
func anthropicType(f Fault) string {
	if t, ok := openAIToAnthropic[f.Code]; ok {
		return t
	}
	for _, t := range []string{f.Type, f.Code} {
		if _, ok := anthropicTypes[t]; ok {
			return t
		}
	}
	if f.Code == "" && f.Type != "" {
		return f.Type
	}
	status := f.status()
	for t, s := range anthropicTypes {
		if s == status {
			return t
		}
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

type anthropicErrorBody struct {
	Type  string             `json:"type"` // "error"
	Error anthropicErrorInfo `json:"error"`
}

type anthropicErrorInfo struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicErrorJSON returns f's error object in Anthropic's shape.
func anthropicErrorJSON(f Fault) []byte {
	b, _ := json.Marshal(anthropicErrorBody{Type: "error", Error: anthropicErrorInfo{Type: anthropicType(f), Message: f.Message}})
	return b
}

// writeAnthropicError sends status and f's error in Anthropic's shape.
func writeAnthropicError(w http.ResponseWriter, status int, f Fault) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(anthropicErrorJSON(f), '\n'))
}
