package retracetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// anthropicPath reports whether path is the route of Anthropic's Messages
// API: /v1/messages, or /messages for a client whose base URL ends in /v1.
func anthropicPath(path string) bool {
	return path == "/v1/messages" || path == "/messages"
}

type anthropicWireRequest struct {
	Model     string                 `json:"model"`
	MaxTokens *int                   `json:"max_tokens"`
	Messages  []anthropicWireMessage `json:"messages"`
	System    json.RawMessage        `json:"system"`
	Stream    bool                   `json:"stream"`
	Tools     []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

type anthropicWireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicBlock is a content block of a request: text, tool_use or
// tool_result (the others are read as blocks without text).
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// decodeAnthropic fills r from a Messages API body, or sets r.Err, so that
// one Script serves both protocols: the system prompt becomes a leading
// "system" message; a user message's text blocks become a "user" message
// and each of its tool_result blocks a "tool" message whose ToolCallID is the
// block's tool_use_id, in the order of the blocks; an assistant message's
// text becomes its Content and its tool_use blocks its ToolCalls (Type
// "function", the input as compact JSON Arguments). Like the real API, it
// refuses a body without max_tokens, and messages whose role is neither user
// nor assistant.
func (r *Request) decodeAnthropic(body []byte) {
	r.Body = body
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		r.Err = errors.New("the body is not a JSON object")
		return
	}
	var w anthropicWireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		r.Err = err
		return
	}
	if w.MaxTokens == nil {
		r.Err = errors.New("max_tokens: Field required")
		return
	}
	r.Model, r.Stream = w.Model, w.Stream
	for _, t := range w.Tools {
		r.Tools = append(r.Tools, t.Name)
	}
	system, err := anthropicText(w.System)
	if err != nil {
		r.Err = fmt.Errorf("system: %w", err)
		return
	}
	if system != "" {
		r.Messages = append(r.Messages, Message{Role: "system", Content: system})
	}
	for i, wm := range w.Messages {
		msgs, err := decodeAnthropicMessage(wm)
		if err != nil {
			r.Err = fmt.Errorf("messages.%d: %w", i, err)
			return
		}
		r.Messages = append(r.Messages, msgs...)
	}
}

// decodeAnthropicMessage returns the messages one Anthropic message stands for.
func decodeAnthropicMessage(wm anthropicWireMessage) ([]Message, error) {
	if wm.Role != "user" && wm.Role != "assistant" {
		return nil, fmt.Errorf("unexpected role %q: the API accepts only user and assistant; use the top-level system parameter for a system prompt", wm.Role)
	}
	blocks, err := anthropicBlocks(wm.Content)
	if err != nil {
		return nil, err
	}
	if wm.Role == "assistant" {
		m := Message{Role: "assistant"}
		var texts []string
		for _, b := range blocks {
			switch b.Type {
			case "text":
				texts = append(texts, b.Text)
			case "tool_use":
				m.ToolCalls = append(m.ToolCalls, ToolCall{ID: b.ID, Type: "function", Name: b.Name, Arguments: compactJSON(b.Input)})
			}
		}
		m.Content = strings.Join(texts, "\n")
		return []Message{m}, nil
	}
	var out []Message
	var texts []string
	flush := func() {
		if len(texts) > 0 {
			out = append(out, Message{Role: "user", Content: strings.Join(texts, "\n")})
			texts = nil
		}
	}
	for _, b := range blocks {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "tool_result":
			flush()
			content, err := anthropicText(b.Content)
			if err != nil {
				return nil, fmt.Errorf("tool_result %s: %w", b.ToolUseID, err)
			}
			out = append(out, Message{Role: "tool", ToolCallID: b.ToolUseID, Content: content})
		}
	}
	flush()
	if len(out) == 0 {
		out = append(out, Message{Role: "user"}) // a turn of blocks without text
	}
	return out, nil
}

// anthropicBlocks returns the blocks of a content that is a string (one
// text block) or an array of blocks.
func anthropicBlocks(raw json.RawMessage) ([]anthropicBlock, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return []anthropicBlock{{Type: "text", Text: s}}, err
	case '[':
		var blocks []anthropicBlock
		err := json.Unmarshal(raw, &blocks)
		return blocks, err
	}
	return nil, errors.New("expected a string or an array of content blocks")
}

// anthropicText returns the text blocks of a content joined by newlines.
func anthropicText(raw json.RawMessage) (string, error) {
	blocks, err := anthropicBlocks(raw)
	if err != nil {
		return "", err
	}
	var texts []string
	for _, b := range blocks {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// compactJSON returns raw without insignificant space, or as it is when it
// is not JSON.
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
