package policies

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/retrace-go/retrace/internal/redact"
)

// Class says what retrying an error can achieve.
type Class string

const (
	Transient       Class = "transient"        // a later identical call may succeed
	Permanent       Class = "permanent"        // the identical call fails identically
	Fatal           Class = "fatal"            // stop the whole task (quota or billing exhausted)
	ContextOverflow Class = "context_overflow" // compact the context; never retry as is
	Programming     Class = "programming"      // a bug (unsupported, panic); never retry
	Canceled        Class = "canceled"         // the caller's context ended
	// Unknown is an error no rule recognises. Whether it is retried is the
	// retry policy's choice (RetryConfig.RetryUnknown): a runtime's exec loop
	// usually retries it, a session does not. A layer that stops on it ends
	// with outcome failed_unknown, never "permanently". It does not count
	// against a breaker.
	Unknown Class = "unknown"
	// UserAction is a call that needs the user to act first (open a URL to
	// authorize, consent): until they have, the identical call fails the
	// same way; once they have, it may succeed. No layer retries it, and it
	// does not count against a breaker: the downstream is not failing.
	UserAction Class = "user_action"
)

// Retryable reports whether a retry of the identical call may succeed.
func (c Class) Retryable() bool { return c == Transient }

// Classification is what the classifier found out about an error.
type Classification struct {
	Class      Class
	Type       string        // low-cardinality error.type: provider code, HTTP status or Go type
	Reason     string        // the rule that decided, e.g. "http 429", "marker: invalid api key"
	RetryAfter time.Duration // the server's hint, 0 if none
}

// Error gives an error an explicit class. It is the first thing the
// classifier looks for, so a tool or provider that knows what went wrong can
// say so and skip the guessing.
type Error struct {
	Class      Class
	Type       string        // error.type; empty means the class name
	RetryAfter time.Duration // a hint for the next attempt, 0 if none
	Err        error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return string(e.Class)
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// APIError is a provider's or tool server's error answer.
type APIError struct {
	StatusCode int           // HTTP status, 0 if the error did not come from HTTP
	Code       string        // the provider's error code or type, e.g. "insufficient_quota", "overloaded_error"
	Message    string        // the provider's message
	RetryAfter time.Duration // from Retry-After or retry-after-ms, 0 if none
	event      bool          // decoded from a stream's error event ([ErrorEventFrom])
}

func (e *APIError) Error() string {
	if e.StatusCode == 0 && e.Code == "" && e.Message == "" {
		return "api error"
	}
	// A provider's code and message are its input, not retrace's: either may
	// echo a key.
	return redact.Text(e.text(), nil, 0)
}

// text is the error's text before redaction: "<status> <code>: <message>".
func (e *APIError) text() string {
	if e.StatusCode == 0 && e.Code == "" && e.Message == "" {
		return "api error"
	}
	var b strings.Builder
	b.Grow(len(e.Code) + len(e.Message) + 8)
	if e.StatusCode != 0 {
		b.WriteString(strconv.Itoa(e.StatusCode))
	}
	if e.Code != "" {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.Code)
	}
	if e.Message != "" {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(e.Message)
	}
	return b.String()
}

// PanicError is a recovered panic: a Programming error that is never retried.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value when it was an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// StreamError is a stream that broke after it began. A stream that ends
// without its terminator (the connection reset, or a clean end before
// OpenAI's [DONE] or Anthropic's message_stop) has an empty Message: a
// dropped stream, which a session retries. Its error.type is
// "stream_dropped", the same on every span of the failure, whatever the
// read error beneath it was.
type StreamError struct {
	Message string // the provider's own words, if it sent any
	Err     error  // the cause: a read error, or io.ErrUnexpectedEOF
}

func (e *StreamError) Error() string { return e.Message }
func (e *StreamError) Unwrap() error { return e.Err }

// ErrorType is the stream error's error.type: "stream_dropped".
func (e *StreamError) ErrorType() string { return "stream_dropped" }
