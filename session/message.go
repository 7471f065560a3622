package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/errchain"
	"github.com/retrace-go/retrace/internal/failure"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/policies"
)

// Roles of a message.
const (
	System    = "system"
	User      = "user"
	Assistant = "assistant"
	ToolRole  = "tool"
)

// Stop reasons of an assistant message.
const (
	StopEnd       = "stop"       // the model finished
	StopLength    = "length"     // the model hit its output limit
	StopToolCalls = "tool_calls" // the model asks for tools
	StopError     = "error"      // the turn failed; ErrorMessage says how
)

// Message is one entry of the conversation.
type Message struct {
	Role       string
	Content    string
	ToolCalls  []ToolCall // an assistant's requests for tools
	ToolCallID string     // a tool result's request
	Name       string     // a tool result's tool
	// StopReason says why an assistant message ended: stop, length,
	// tool_calls, or error.
	StopReason string
	// ErrorMessage is a failed turn's "<Type>: <message>" (just "<Type>" when
	// the message is empty); empty when the provider's stream dropped
	// without a word.
	ErrorMessage string
	Usage        Usage
	// Provider and Model name who made an assistant message: the
	// provider's gen_ai.provider.name and the model asked for (or the one
	// the provider says answered). With a fallback chain they say which
	// candidate answered.
	Provider, Model string
	// ResponseID is the provider's ID for the completion, if it gave one.
	ResponseID string
	// FirstChunk is how long the first piece of the answer took to arrive
	// after the request was sent; 0 when the answer came in one piece.
	FirstChunk time.Duration
	// PassedOver lists, for a message a fallback candidate made, the
	// candidates before it that failed the turn, in order, and why; empty
	// when the first candidate made it.
	PassedOver []CandidateFailure
}

// ToolCall is a model's request to call a tool.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON
}

// Tool is a tool the model may call.
type Tool struct {
	Name        string
	Description string
	Parameters  map[string]any // JSON schema
}

// Usage counts a model call's tokens.
type Usage struct {
	InputTokens, OutputTokens int
}

// Request is one model call.
type Request struct {
	Model    string
	Messages []Message
	Tools    []Tool
}

// Delta is a piece of a streaming answer.
type Delta struct {
	Text string
}

// Provider makes streaming model calls. Stream calls onDelta (which may be
// nil) with each piece of text as it arrives and returns the complete
// assistant message. It fails with a dropped stream
// ([policies.StreamDropped]) when the stream breaks after it began, and with a *policies.Error when the provider answers
// with an error.
type Provider interface {
	Stream(ctx context.Context, req Request, onDelta func(Delta)) (Message, error)
	// Name is the provider for gen_ai.provider.name, e.g. "openai".
	Name() string
}

// SecretHolder is implemented by a Provider that holds credentials (its API
// key): a session redacts them by exact value wherever retrace writes text
// for its calls, spans, diagnoses and the history's error messages included.
type SecretHolder interface {
	Secrets() []string
}

// ErrorText formats err as an agent turn records it: "<Type>: <message>",
// just "<Type>" when the message is empty, with secrets redacted, cut to at
// most [MaxErrorText] bytes (the cut marked with "…"). A provider's stream
// error keeps its own words, possibly none; retrace's own layer errors are
// looked through to what the provider said.
func ErrorText(err error) string {
	return errorText(err, nil)
}

// errorText is ErrorText with the known secrets of the call redacted by
// exact value too, before the patterns.
func errorText(err error, known []string) string {
	return engine.Truncate(describe(err, known), MaxErrorText)
}

func describe(err error, known []string) string {
	err = failure.Underlying(err)
	e, own := errors.AsType[*policies.Error](err)
	if own && e.Type == "stream_dropped" {
		return redact.Text(e.Message, known, 0)
	}
	msg := strings.TrimSpace(redact.Text(knownFirst(err, known), known, 0))
	t := typeName(err)
	if msg == "" {
		return t
	}
	return t + ": " + msg
}

// knownFirst is err's text with the known values redacted before the
// patterns that an API error's Error applies to its own fields: a pattern
// that took part of a known value would leave the rest.
func knownFirst(err error, known []string) string {
	if api, ok := err.(*policies.Error); ok && len(known) > 0 && (api.StatusCode != 0 || api.Code != "") {
		c := policies.Error{StatusCode: api.StatusCode, Code: redact.Known(api.Code, known), Message: redact.Known(api.Message, known)}
		return c.Error()
	}
	return err.Error()
}

// typeName is the short Go type of err's first error that is not a
// wrapper (retrace's layer failure, a URL's, fmt's): OpError,
// DNSError; "Error" for errors.New's. Wrappers are told by their types,
// never by their names.
func typeName(err error) string {
	var c errchain.Chain
	c.Add(err)
	for _, e := range c.All() {
		t := reflect.TypeOf(e)
		switch t {
		case wrapErrorType, wrapErrorsType, urlErrorType:
		case errorStringType:
			return "Error"
		case policiesErrorType:
			if e := e.(*policies.Error); e.Outcome == "" {
				if e.StatusCode != 0 || e.Code != "" || e.Class == "" && e.Message != "" {
					return "APIError" // a server's answer, by the name its SDKs give it
				}
				return "Error"
			}
		default:
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			return t.Name()
		}
	}
	return "Error"
}

// The types typeName looks through, and errors.New's; fmt's and errors'
// are unexported, so they are taken from errors those packages make.
var (
	wrapErrorType     = reflect.TypeOf(fmt.Errorf("%w", io.EOF))
	wrapErrorsType    = reflect.TypeOf(fmt.Errorf("%w%w", io.EOF, io.EOF))
	urlErrorType      = reflect.TypeFor[*url.Error]()
	policiesErrorType = reflect.TypeFor[*policies.Error]()
	errorStringType   = reflect.TypeOf(errors.New(""))
)
