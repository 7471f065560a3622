package retracetest

import (
	"encoding/json"
	"net/http"
)

// dialect is the API an answer speaks. The route that serves a request
// picks it, so that one script fails alike on both.
type dialect int

const (
	// openAIDialect is /v1/chat/completions: OpenAI's error object, with a
	// code and a type.
	openAIDialect dialect = iota
	// anthropicDialect is /v1/messages: Anthropic's error object, with a
	// type only, and its error events named "error".
	anthropicDialect
)

// wording is an error as one dialect says it.
type wording struct {
	status int
	// code is OpenAI's error code, sent as null when empty; Anthropic's
	// errors have none.
	code    string
	typ     string
	message string
}

// meaning names an error fault by what happened, whatever the dialect; its
// row of the catalogue says it in each.
type meaning int

const (
	// ownWords is a fault that brings its own Status, Code, Type and
	// Message (Status, ErrorEvent, HugeError, a ServerError of a status
	// without a row): Anthropic's route maps them with anthropicType.
	ownWords meaning = iota
	rateLimited
	internalError
	badGateway
	unavailable
	overloaded
	invalidAPIKey
	insufficientQuota
	contextOverflow
	invalidImage
	requestTooLarge
)

// catalogue says each meaning as each dialect does, in the provider's own
// words: its status, error code and type, and the message that clients and
// retrace's classifier recognise ("invalid x-api-key", "prompt is too long:
// N tokens > M maximum", context_length_exceeded). A fault is one row here
// and a constructor that names it. rateLimited's OpenAI message is a format
// of the retry delay, which OpenAI's message states.
var catalogue = [...]struct{ openAI, anthropic wording }{
	rateLimited: {
		wording{http.StatusTooManyRequests, "rate_limit_exceeded", "requests", "Rate limit reached for requests. Please try again in %s."},
		wording{http.StatusTooManyRequests, "", "rate_limit_error", "This request would exceed the rate limit for your organization of 50 requests per minute. Please try again later."},
	},
	internalError: {
		wording{http.StatusInternalServerError, "server_error", "server_error", "The server had an error while processing your request."},
		wording{http.StatusInternalServerError, "", "api_error", "Internal server error"},
	},
	badGateway: {
		wording{http.StatusBadGateway, "server_error", "server_error", "Bad gateway"},
		wording{http.StatusBadGateway, "", "api_error", "Bad gateway"},
	},
	unavailable: {
		wording{http.StatusServiceUnavailable, "server_error", "server_error", "Service unavailable"},
		wording{http.StatusServiceUnavailable, "", "api_error", "Service unavailable"},
	},
	// OpenAI has no 529: an OpenAI-compatible gateway in front of an
	// overloaded Anthropic passes Anthropic's name on as the code.
	overloaded: {
		wording{529, "overloaded_error", "overloaded_error", "Overloaded"},
		wording{529, "", "overloaded_error", "Overloaded"},
	},
	invalidAPIKey: {
		wording{http.StatusUnauthorized, "invalid_api_key", "invalid_request_error", "Incorrect API key provided: sk-test***...***abcd. You can find your API key at https://platform.openai.com/account/api-keys."},
		wording{http.StatusUnauthorized, "", "authentication_error", "invalid x-api-key"},
	},
	// OpenAI says a spent quota with a 429 that no retry can fix; Anthropic
	// with a 402.
	insufficientQuota: {
		wording{http.StatusTooManyRequests, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details."},
		wording{http.StatusPaymentRequired, "", "billing_error", "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."},
	},
	contextOverflow: {
		wording{http.StatusBadRequest, "context_length_exceeded", "invalid_request_error", "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages."},
		wording{http.StatusBadRequest, "", "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"},
	},
	invalidImage: {
		wording{http.StatusBadRequest, "invalid_image", "invalid_request_error", "Invalid image: image data is not a valid base64-encoded image."},
		wording{http.StatusBadRequest, "", "invalid_request_error", "Invalid image: image data is not a valid base64-encoded image."},
	},
	requestTooLarge: {
		wording{http.StatusRequestEntityTooLarge, "request_too_large", "invalid_request_error", "Request exceeds the maximum allowed number of bytes."},
		wording{http.StatusRequestEntityTooLarge, "", "request_too_large", "Request exceeds the maximum allowed number of bytes."},
	},
}

// errorOf returns the error answer of m. Its fields hold m in OpenAI's
// words, which describe the fault (String, Status) whatever route serves it.
func errorOf(m meaning) Fault {
	w := catalogue[m].openAI
	return Fault{kind: kindError, meaning: m, Status: w.status, Code: w.code, Type: w.typ, Message: w.message}
}

// in returns f's error as dialect d says it. OpenAI's words are f's fields.
// On Anthropic's route a fault of the catalogue says what its row says, and
// any other keeps its status and message, with the Anthropic type that
// anthropicType finds for it.
func (f Fault) in(d dialect) wording {
	if d == anthropicDialect {
		if f.meaning != ownWords {
			return catalogue[f.meaning].anthropic
		}
		return wording{status: f.status(), typ: anthropicType(f), message: f.Message}
	}
	return wording{status: f.status(), code: f.Code, typ: f.Type, message: f.Message}
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

// anthropicOfCode returns the Anthropic type of an OpenAI error code that
// the catalogue names, so that Status and ErrorEvent with one of OpenAI's
// codes fail on Anthropic's route as that code's fault does.
func anthropicOfCode(code string) (string, bool) {
	if code == "" {
		return "", false
	}
	for _, row := range catalogue {
		if row.openAI.code == code {
			return row.anthropic.typ, true
		}
	}
	return "", false
}

// anthropicType is the Anthropic error type of a fault that brings its own
// words: the type of its OpenAI code when the catalogue names the code, else
// its Type or Code when that is one of Anthropic's, else its Type as it is
// when it has no Code (Status(s, "", typ, m) is Anthropic's error typ), else
// the type of its status. The code comes first: OpenAI's errors name a
// generic type (invalid_request_error) beside the code that says what failed
// (invalid_api_key).
func anthropicType(f Fault) string {
	if t, ok := anthropicOfCode(f.Code); ok {
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

// The JSON of each dialect's error object.
type (
	openAIErrorBody struct {
		Error openAIError `json:"error"`
	}
	openAIError struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	anthropicErrorBody struct {
		Type  string             `json:"type"` // "error"
		Error anthropicErrorInfo `json:"error"`
	}
	anthropicErrorInfo struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
)

// body returns w as d's error object: OpenAI's {"error": {"message",
// "type", "param", "code"}} or Anthropic's {"type": "error", "error":
// {"type", "message"}}.
func (w wording) body(d dialect) []byte {
	var v any
	if d == anthropicDialect {
		v = anthropicErrorBody{Type: "error", Error: anthropicErrorInfo{Type: w.typ, Message: w.message}}
	} else {
		e := openAIErrorBody{Error: openAIError{Message: w.message, Type: w.typ}}
		if w.code != "" {
			e.Error.Code = &w.code
		}
		v = e
	}
	b, _ := json.Marshal(v)
	return b
}

// errorEventName is the name d gives an error event that names none: "error"
// for Anthropic, whose clients dispatch on it; none for OpenAI, whose streams
// carry data alone.
func (d dialect) errorEventName() string {
	if d == anthropicDialect {
		return "error"
	}
	return ""
}

// writeError sends w's status and its error object in dialect d.
func writeError(rw http.ResponseWriter, d dialect, w wording) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(w.status)
	_, _ = rw.Write(append(w.body(d), '\n'))
}
