package retracetest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultReply is the text of a successful answer whose fault sets no Reply.
const DefaultReply = "Hello from the fault server."

// kind says what the server does with a request. It is how a Fault is
// implemented, unexported: a test says which fault it wants with the
// constructors (OK, Status, StreamReset, Hang, …), which set it.
type kind int

const (
	// kindOK answers with a successful completion of Fault.Reply and
	// Fault.ToolCalls.
	kindOK kind = iota
	// kindError answers with the fault's error in the words of the route
	// that serves it (Fault.in).
	kindError
	// kindStreamReset sends the status, the headers and the first
	// Fault.Chunks chunks of the answer, then resets the TCP connection.
	kindStreamReset
	// kindStreamEOF sends the status, the headers and the first Fault.Chunks
	// chunks of the answer, then ends the body cleanly without a finish
	// chunk or [DONE].
	kindStreamEOF
	// kindHang never answers; the handler returns when the request's context
	// ends.
	kindHang
	// kindMalformed answers 200 with an event stream whose second event is
	// not valid JSON.
	kindMalformed
	// kindBadJSON answers 200 with Content-Type application/json and a body
	// that is not JSON.
	kindBadJSON
	// kindRawError answers Fault.Status with Fault.Body as it is, with
	// Content-Type application/json: an error body of any shape, such as
	// {"error": "text"}.
	kindRawError
	// kindErrorEvent sends the status, the headers and the first
	// Fault.Chunks chunks of the answer, then one error event, and ends the
	// body: its data is Fault.Body when set, else the fault's error object
	// in the route's words; an "event:" line comes first with Fault.Event, or
	// the name the route's API gives an error event when Fault.Event is
	// empty.
	kindErrorEvent
	// kindHugeEvent sends the status and the headers, then one event of
	// Fault.Size bytes in "data:" lines of Fault.LineBytes bytes each (one
	// line when LineBytes is 0) with no blank line to end it, and ends the
	// body. The event is generated as it is sent, never held in memory.
	kindHugeEvent
	// kindHugeError answers Fault.Status with an error body of Fault.Size
	// bytes in the route's shape, whose message fills it, generated as it is
	// sent.
	kindHugeError
)

// String returns the kind's name.
func (k kind) String() string {
	switch k {
	case kindOK:
		return "ok"
	case kindError:
		return "error"
	case kindStreamReset:
		return "reset"
	case kindStreamEOF:
		return "eof"
	case kindHang:
		return "hang"
	case kindMalformed:
		return "malformed"
	case kindBadJSON:
		return "bad-json"
	case kindRawError:
		return "raw-error"
	case kindErrorEvent:
		return "error-event"
	case kindHugeEvent:
		return "huge-event"
	case kindHugeError:
		return "huge-error"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Fault describes what the server does with one request. The zero value is a
// success with [DefaultReply].
type Fault struct {
	// kind selects the behaviour, as the constructor that made the fault
	// set it; the zero kind is a success.
	kind kind
	// meaning is the catalogue's row of an error made by one of its
	// constructors, which the Messages route answers in Anthropic's words.
	meaning meaning
	// Reply is the text of a success and of the chunks that StreamReset,
	// StreamEOF and Malformed send. Empty means DefaultReply when there are
	// no ToolCalls, and no text at all when there are.
	Reply string
	// ToolCalls are the tool calls of the answer, sent after its text with
	// finish_reason "tool_calls". An empty ID is sent as call_N_I, where N is
	// the request's index and I the call's; an empty Type as "function"; an
	// empty Arguments as "{}". A stream sends each call as a chunk with its
	// ID, type and name, then its arguments in up to three pieces.
	ToolCalls []ToolCall
	// Status, Code, Type and Message make the error answer of Status and of
	// the constructors that name an error (RateLimited, InvalidAPIKey, …) as
	// OpenAI's route sends it, that of HugeError, and the error event of
	// ErrorEvent. An empty Code is sent as null; a zero Status is sent as
	// 500. On the Messages route a fault made by one of those constructors
	// answers in Anthropic's own words for its meaning, whatever these
	// fields hold; any other answers its Status and Message with the
	// Anthropic type that [Status] describes.
	Status  int
	Code    string
	Type    string
	Message string
	// Body is the raw body of StringError's answer and, when set, the raw
	// data of ErrorEvent's event.
	Body string
	// Event is the event name that ErrorEvent sends before its data, such
	// as "error"; empty sends no "event:" line.
	Event string
	// Size is the size in bytes of HugeEvent's event and of HugeError's
	// body.
	Size int64
	// LineBytes is the size in bytes of each "data:" line of HugeEvent,
	// its "data: " prefix and newline included; 0 sends the event as one
	// line without a newline.
	LineBytes int
	// Header holds extra headers for the answer, such as Retry-After.
	Header http.Header
	// Chunks is how many chunks of the answer StreamReset, StreamEOF and
	// ErrorEvent send before the stream is cut or the error event is sent (at most as many as the answer has): the content
	// chunks first, then the tool-call chunks.
	Chunks int
	// Delay is how long the server waits before answering, multiplied by
	// the server's time scale. The wait ends when the request's context ends,
	// and the request is then dropped without an answer.
	Delay time.Duration
}

// OK returns a success with DefaultReply.
func OK() Fault { return Fault{} }

// Reply returns a success whose reply is text.
func Reply(text string) Fault { return Fault{Reply: text} }

// CallTools returns a success whose answer is the given tool calls, without
// text, as a model that wants the agent to run tools answers.
func CallTools(calls ...ToolCall) Fault { return Fault{ToolCalls: slices.Clone(calls)} }

// Status returns an error answer with the given HTTP status and error code,
// type and message, as they are on OpenAI's route; an empty code is sent as
// null. On the Messages route it answers Anthropic's error of the same status
// and message, whose type is the Anthropic type of the code when another
// fault names that code (insufficient_quota is billing_error), else typ when
// it is one of Anthropic's or the code is empty (Status(403, "",
// "permission_error", m) is Anthropic's permission_error), else the type of
// the status.
func Status(status int, code, typ, message string) Fault {
	return Fault{kind: kindError, Status: status, Code: code, Type: typ, Message: message}
}

// RateLimited returns a 429 rate limit whose Retry-After header is
// retryAfter in whole seconds, rounded up: rate_limit_exceeded on OpenAI's
// route, rate_limit_error on the Messages route. For OpenAI's retry-after-ms
// header, replace the fault's Header.
func RateLimited(retryAfter time.Duration) Fault {
	f := errorOf(rateLimited)
	f.Message = fmt.Sprintf(f.Message, retryAfter)
	f.Header = http.Header{"Retry-After": {strconv.FormatInt(ceilDiv(retryAfter, time.Second), 10)}}
	return f
}

// ServerError returns a server error with the given status. 500, 502 and
// 503 are server_error on OpenAI's route and api_error on the Messages
// route, each in its provider's words; 529 is Anthropic's overloaded_error,
// "Overloaded", on both. Any other status is server_error with the status's
// text, api_error on the Messages route.
func ServerError(status int) Fault {
	switch status {
	case http.StatusInternalServerError:
		return errorOf(internalError)
	case http.StatusBadGateway:
		return errorOf(badGateway)
	case http.StatusServiceUnavailable:
		return errorOf(unavailable)
	case 529:
		return errorOf(overloaded)
	}
	return Status(status, "server_error", "server_error", http.StatusText(status))
}

// InvalidAPIKey returns a 401 for a wrong API key: invalid_api_key naming a
// masked key on OpenAI's route, authentication_error "invalid x-api-key" on
// the Messages route.
func InvalidAPIKey() Fault { return errorOf(invalidAPIKey) }

// ContextOverflow returns a 400 for a prompt longer than the model's
// context: context_length_exceeded on OpenAI's route, invalid_request_error
// "prompt is too long: 210000 tokens > 200000 maximum" on the Messages route.
func ContextOverflow() Fault { return errorOf(contextOverflow) }

// InsufficientQuota returns an account that cannot pay, which no retry can
// fix: 429 insufficient_quota on OpenAI's route, 402 billing_error on the
// Messages route.
func InsufficientQuota() Fault { return errorOf(insufficientQuota) }

// InvalidImage returns a 400 for an image that cannot be read: invalid_image
// on OpenAI's route, invalid_request_error on the Messages route.
func InvalidImage() Fault { return errorOf(invalidImage) }

// RequestTooLarge returns a 413 for a request body over the provider's
// limit, in the same words on both routes: code request_too_large on
// OpenAI's, type request_too_large on the Messages route.
func RequestTooLarge() Fault { return errorOf(requestTooLarge) }

// StreamReset returns a fault that sends 200, the headers and afterChunks
// content chunks, then resets the TCP connection. A request with stream=false
// gets the first half of its JSON body instead of chunks.
func StreamReset(afterChunks int) Fault { return Fault{kind: kindStreamReset, Chunks: afterChunks} }

// StreamEOF returns a fault that sends 200, the headers and afterChunks
// content chunks, then ends the body cleanly without a finish chunk or
// [DONE]. A request with stream=false gets the first half of its JSON body.
func StreamEOF(afterChunks int) Fault { return Fault{kind: kindStreamEOF, Chunks: afterChunks} }

// Hang returns a fault that never answers.
func Hang() Fault { return Fault{kind: kindHang} }

// Malformed returns a 200 event stream whose second event's data is not
// valid JSON, followed by [DONE]. A request with stream=false gets a
// truncated JSON body.
func Malformed() Fault { return Fault{kind: kindMalformed} }

// BadJSON returns a 200 with Content-Type application/json and an HTML body,
// whether or not the request asked for a stream.
func BadJSON() Fault { return Fault{kind: kindBadJSON} }

// StringError returns an error answer whose error is a string, not an
// object: {"error": text}, as some gateways send, with Content-Type
// application/json. [Fault.WithBody] replaces the body with one of any
// shape, sent as it is.
func StringError(status int, text string) Fault {
	b, _ := json.Marshal(map[string]string{"error": text})
	return Fault{kind: kindRawError, Status: status, Body: string(b)}
}

// ErrorEvent returns a 200 event stream that sends afterChunks content
// chunks, then an error event, and ends: a provider failing in the middle of
// its answer. On OpenAI's route the event is {"error": {"message", "type",
// "param", "code"}} without an event name; on the Messages route it is
// Anthropic's "event: error" with {"type": "error", "error": {"type",
// "message"}}, its type found as [Status] finds it (ErrorEvent(n, "",
// "overloaded_error", "Overloaded") is Anthropic's overload). Name the event
// with [Fault.WithEvent] and replace its data with [Fault.WithBody]. A
// request with stream=false gets the error answer with Fault.Status instead
// (500 when it is zero).
func ErrorEvent(afterChunks int, code, typ, message string) Fault {
	return Fault{kind: kindErrorEvent, Chunks: afterChunks, Code: code, Type: typ, Message: message}
}

// HugeEvent returns a 200 event stream whose one event is size bytes of
// "data:" lines of lineBytes bytes each (0: one line without a newline) and
// never ends with a blank line: a broken gateway, or an attack on the
// client's memory.
func HugeEvent(size int64, lineBytes int) Fault {
	return Fault{kind: kindHugeEvent, Size: size, LineBytes: lineBytes}
}

// HugeError returns the error of ServerError(status) with a body of size
// bytes, in the shape of the route's API, most of them its message.
func HugeError(status int, size int64) Fault {
	f := ServerError(status)
	f.kind, f.Size = kindHugeError, size
	return f
}

// WithEvent returns f with the event name its error event is sent with.
func (f Fault) WithEvent(name string) Fault {
	f.Event = name
	return f
}

// WithBody returns f with the raw body of its error answer, or the raw data
// of its error event.
func (f Fault) WithBody(body string) Fault {
	f.Body = body
	return f
}

// WithDelay returns f waiting d (times the server's time scale) before it
// answers, or never if the request's context ends first: OK().WithDelay(d)
// is a slow success.
func (f Fault) WithDelay(d time.Duration) Fault {
	f.Delay = d
	return f
}

// WithReply returns f with the reply text.
func (f Fault) WithReply(text string) Fault {
	f.Reply = text
	return f
}

// WithToolCalls returns f with the tool calls, replacing any it had. Added
// to OK or Reply it makes a success that calls tools; added to StreamReset,
// StreamEOF or Malformed it makes a stream of tool calls that breaks.
func (f Fault) WithToolCalls(calls ...ToolCall) Fault {
	f.ToolCalls = slices.Clone(calls)
	return f
}

// String describes the fault for logs by its OpenAI words (its code, else
// its type), such as "429 rate_limit_exceeded",
// "reset after 2 chunks" or "tool calls: search_docs".
func (f Fault) String() string {
	var s string
	switch f.kind {
	case kindOK:
		s = f.kind.String()
		if len(f.ToolCalls) > 0 {
			s = "tool calls: " + f.toolNames()
		}
	case kindError, kindRawError:
		s = strconv.Itoa(f.status())
		if name := cmp.Or(f.Code, f.Type); name != "" {
			s += " " + name
		}
	case kindHugeError:
		s = fmt.Sprintf("%d with a body of %d bytes", f.status(), f.Size)
	case kindHugeEvent:
		s = fmt.Sprintf("an event of %d bytes", f.Size)
	case kindErrorEvent:
		s = fmt.Sprintf("error event %s after %d chunks", cmp.Or(f.Code, f.Type), f.Chunks)
	case kindStreamReset, kindStreamEOF:
		s = fmt.Sprintf("%s after %d chunks", f.kind, f.Chunks)
	default:
		s = f.kind.String()
	}
	if f.kind != kindOK && f.answers() && len(f.ToolCalls) > 0 {
		s += " (tool calls: " + f.toolNames() + ")"
	}
	if f.Delay > 0 {
		s += " after " + f.Delay.String()
	}
	return s
}

func (f Fault) status() int {
	if f.Status == 0 {
		return http.StatusInternalServerError
	}
	return f.Status
}

// answers reports whether the fault sends (part of) an answer.
func (f Fault) answers() bool {
	switch f.kind {
	case kindOK, kindStreamReset, kindStreamEOF, kindMalformed, kindErrorEvent:
		return true
	}
	return false
}

// toolNames returns the names of the fault's tool calls, comma-separated.
func (f Fault) toolNames() string {
	names := make([]string, len(f.ToolCalls))
	for i, c := range f.ToolCalls {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// text returns the text of the answer.
func (f Fault) text() string {
	if f.Reply == "" && len(f.ToolCalls) == 0 {
		return DefaultReply
	}
	return f.Reply
}

// toolCalls returns the tool calls of the answer to request n with the
// defaults filled in.
func (f Fault) toolCalls(n int) []ToolCall {
	calls := slices.Clone(f.ToolCalls)
	for i := range calls {
		c := &calls[i]
		if c.ID == "" {
			c.ID = fmt.Sprintf("call_%d_%d", n, i)
		}
		if c.Type == "" {
			c.Type = "function"
		}
		if c.Arguments == "" {
			c.Arguments = "{}"
		}
	}
	return calls
}

// ceilDiv returns d/unit rounded up, and 0 for a negative d.
func ceilDiv(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + unit - 1) / unit)
}

// Script picks the fault for the n-th request the server received (0-based).
// It is called concurrently when requests arrive concurrently.
type Script func(n int, req Request) Fault

// Always answers every request with f.
func Always(f Fault) Script {
	return func(int, Request) Fault { return f }
}

// Sequence answers request i with faults[i] and every request after the list
// with its last fault; an empty sequence always succeeds.
func Sequence(faults ...Fault) Script {
	faults = append([]Fault(nil), faults...)
	return func(n int, _ Request) Fault {
		switch {
		case len(faults) == 0:
			return OK()
		case n < len(faults):
			return faults[n]
		default:
			return faults[len(faults)-1]
		}
	}
}

// FailFirst answers the first n requests with f and the rest with OK; n <= 0
// answers every request with f.
func FailFirst(n int, f Fault) Script {
	if n <= 0 {
		return Always(f)
	}
	return func(i int, _ Request) Fault {
		if i < n {
			return f
		}
		return OK()
	}
}
