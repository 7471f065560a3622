package retracetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Request is a chat-completion request as the server received it.
type Request struct {
	// Index is the 0-based arrival index, the n given to the Script.
	Index int
	// Path is the URL path, /chat/completions or /v1/chat/completions.
	Path string
	// Model, Messages and Stream are decoded from the body.
	Model    string
	Messages []Message
	Stream   bool
	// Tools are the names of the tools the request offers, in order: the
	// function name of each function tool (and the name of each custom
	// tool) of its tools array.
	Tools []string
	// IncludeUsage is stream_options.include_usage.
	IncludeUsage bool
	// Header holds the request's headers with the value of Authorization,
	// Api-Key and X-Api-Key masked to their last four characters.
	Header http.Header
	// Body is the raw request body.
	Body []byte
	// Err is non-nil when the body was not a valid chat-completion request;
	// the server then answered 400 without asking the Script.
	Err error
}

// Message is one message of a request.
type Message struct {
	// Role is system, developer, user, assistant or tool.
	Role string
	// Content is the text of the message: a string content as is, or the
	// text parts of an array content joined by newlines.
	Content string
	// ToolCalls are the tool calls of an assistant message.
	ToolCalls []ToolCall
	// ToolCallID is the ID of the call that a tool message answers.
	ToolCallID string
	// Name is the message's optional name field.
	Name string
}

// ToolCall is a tool call: one of an assistant message in a request, or one
// that a [Fault] answers with.
type ToolCall struct {
	// ID identifies the call; the tool message that answers it carries it
	// as its ToolCallID.
	ID string
	// Type is "function".
	Type string
	// Name is the name of the function to call.
	Name string
	// Arguments is the JSON text of the function's arguments.
	Arguments string
}

// clone returns a deep copy of r.
func (r Request) clone() Request {
	r.Messages = slices.Clone(r.Messages)
	for i := range r.Messages {
		r.Messages[i].ToolCalls = slices.Clone(r.Messages[i].ToolCalls)
	}
	r.Tools = slices.Clone(r.Tools)
	r.Header = r.Header.Clone()
	r.Body = bytes.Clone(r.Body)
	return r
}

// promptTokens counts the whitespace-separated words of all message contents
// and tool-call arguments.
func (r Request) promptTokens() int {
	n := 0
	for _, m := range r.Messages {
		n += words(m.Content, m.ToolCalls)
	}
	return n
}

// words counts the whitespace-separated words of text and of the calls'
// arguments.
func words(text string, calls []ToolCall) int {
	n := len(strings.Fields(text))
	for _, c := range calls {
		n += len(strings.Fields(c.Arguments))
	}
	return n
}

type wireRequest struct {
	Model         string        `json:"model"`
	Messages      []wireMessage `json:"messages"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
		Custom *struct {
			Name string `json:"name"`
		} `json:"custom"`
	} `json:"tools"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
}

// wireToolCall is a tool call as a request and a chat.completion carry it.
type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// decode fills r from body, or sets r.Err.
func (r *Request) decode(body []byte) {
	r.Body = body
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		r.Err = errors.New("the body is not a JSON object")
		return
	}
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		r.Err = err
		return
	}
	r.Model, r.Stream = w.Model, w.Stream
	r.IncludeUsage = w.StreamOptions != nil && w.StreamOptions.IncludeUsage
	for _, t := range w.Tools {
		switch {
		case t.Function != nil:
			r.Tools = append(r.Tools, t.Function.Name)
		case t.Custom != nil:
			r.Tools = append(r.Tools, t.Custom.Name)
		}
	}
	for i, wm := range w.Messages {
		content, err := decodeContent(wm.Content)
		if err != nil {
			r.Err = fmt.Errorf("messages[%d].content: %w", i, err)
			return
		}
		m := Message{Role: wm.Role, Content: content, ToolCallID: wm.ToolCallID, Name: wm.Name}
		for _, tc := range wm.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: tc.ID, Type: tc.Type, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		r.Messages = append(r.Messages, m)
	}
}

// decodeContent returns the text of a string, null or content-part array.
func decodeContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", err
		}
		var texts []string
		for _, p := range parts {
			if p.Text != nil && (p.Type == "text" || p.Type == "") {
				texts = append(texts, *p.Text)
			}
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", errors.New("expected a string, an array of content parts or null")
}

// maskedHeaders returns a copy of h with credentials masked.
func maskedHeaders(h http.Header) http.Header {
	h = h.Clone()
	for _, k := range []string{"Authorization", "Api-Key", "X-Api-Key"} {
		for i, v := range h[k] {
			h[k][i] = mask(v)
		}
	}
	return h
}

// mask keeps an auth scheme and the last four characters of a credential.
func mask(v string) string {
	scheme, secret, ok := strings.Cut(v, " ")
	if !ok {
		scheme, secret = "", v
	} else {
		scheme += " "
	}
	if len(secret) <= 4 {
		return scheme + "***"
	}
	return scheme + "***" + secret[len(secret)-4:]
}
