package retracetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// respondAnthropic answers a Messages API request with f: Anthropic's
// server-sent events, error bodies and message object. The faults whose
// answer does not depend on the protocol (a hang, a body that is not JSON,
// a raw error body, a huge event) are answered as on the OpenAI route.
func respondAnthropic(w http.ResponseWriter, r *http.Request, req Request, f Fault) {
	switch f.kind {
	case kindHang, kindBadJSON, kindRawError, kindHugeEvent:
		respond(w, r, req, f)
		return
	}
	for k, vs := range f.Header {
		w.Header()[k] = append([]string(nil), vs...)
	}
	w.Header().Set("Request-Id", fmt.Sprintf("req_%d", req.Index))
	st := stream{w: w, rc: http.NewResponseController(w), req: req, id: fmt.Sprintf("msg_%d", req.Index)}
	a := answer{text: f.text(), calls: anthropicCalls(f, req.Index)}
	switch f.kind {
	case kindError:
		writeError(w, anthropicDialect, f.in(anthropicDialect))
	case kindHugeError:
		writeHugeError(r.Context(), w, anthropicDialect, f)
	case kindErrorEvent:
		if !req.Stream {
			writeError(w, anthropicDialect, f.in(anthropicDialect))
			return
		}
		st.begin()
		if st.anthropicCut(a, f.Chunks) != nil {
			return
		}
		_ = st.errorEvent(anthropicDialect, f)
	case kindMalformed:
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"id": %q, "type": "message", "content": [`, st.id)
			return
		}
		st.begin()
		if st.anthropicEvent(st.messageStart(a)) != nil ||
			st.named("content_block_start", `{"type": "content_block_start", "index": 0,`) != nil {
			return
		}
		_ = st.anthropicEvent(anthropicEvent{name: "message_stop", data: anthropicBare{Type: "message_stop"}})
	case kindStreamReset, kindStreamEOF:
		if req.Stream {
			st.begin()
			_ = st.anthropicCut(a, f.Chunks)
		} else {
			w.Header().Set("Content-Type", "application/json")
			b := st.anthropicMessage(a)
			_, _ = w.Write(b[:len(b)/2])
			_ = st.rc.Flush()
		}
		if f.kind == kindStreamReset {
			reset(st.rc)
		}
	default:
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(st.anthropicMessage(a))
			return
		}
		st.begin()
		for _, e := range st.anthropicEvents(a) {
			if st.anthropicEvent(e) != nil {
				return
			}
		}
	}
}

// anthropicCalls returns f's tool calls for request n, with their defaults
// filled in; an empty ID is sent as toolu_N_I, in Anthropic's style.
func anthropicCalls(f Fault, n int) []ToolCall {
	calls := f.toolCalls(n)
	for i := range calls {
		if f.ToolCalls[i].ID == "" {
			calls[i].ID = fmt.Sprintf("toolu_%d_%d", n, i)
		}
	}
	return calls
}

// The JSON of Anthropic's events and message object.
type (
	anthropicBare struct { // an event of a type alone: ping, message_stop
		Type string `json:"type"`
	}
	anthropicUsage struct {
		InputTokens  *int `json:"input_tokens,omitempty"`
		OutputTokens int  `json:"output_tokens"`
	}
	anthropicContent struct {
		Type  string          `json:"type"`
		Text  *string         `json:"text,omitempty"`
		ID    string          `json:"id,omitempty"`
		Name  string          `json:"name,omitempty"`
		Input json.RawMessage `json:"input,omitempty"`
	}
	anthropicMessage struct {
		ID           string             `json:"id"`
		Type         string             `json:"type"`
		Role         string             `json:"role"`
		Model        string             `json:"model"`
		Content      []anthropicContent `json:"content"`
		StopReason   *string            `json:"stop_reason"`
		StopSequence *string            `json:"stop_sequence"`
		Usage        anthropicUsage     `json:"usage"`
	}
	anthropicMessageStart struct {
		Type    string           `json:"type"`
		Message anthropicMessage `json:"message"`
	}
	anthropicBlockStart struct {
		Type         string           `json:"type"`
		Index        int              `json:"index"`
		ContentBlock anthropicContent `json:"content_block"`
	}
	anthropicDelta struct {
		Type        string  `json:"type"`
		Text        *string `json:"text,omitempty"`
		PartialJSON *string `json:"partial_json,omitempty"`
	}
	anthropicBlockDelta struct {
		Type  string         `json:"type"`
		Index int            `json:"index"`
		Delta anthropicDelta `json:"delta"`
	}
	anthropicBlockStop struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	anthropicMessageDelta struct {
		Type  string `json:"type"`
		Delta struct {
			StopReason   string  `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
		Usage anthropicUsage `json:"usage"`
	}
)

// anthropicEvent is one server-sent event of an answer.
type anthropicEvent struct {
	name  string
	data  any  // marshalled as the event's data
	delta bool // a content_block_delta: what Fault.Chunks counts
}

// stopReason is Anthropic's stop reason for a: tool_use or end_turn.
func (a answer) stopReason() string {
	if len(a.calls) > 0 {
		return "tool_use"
	}
	return "end_turn"
}

// hasText reports whether a's answer has a text block: when it has text,
// or nothing else.
func (a answer) hasText() bool { return a.text != "" || len(a.calls) == 0 }

// messageStart is the message_start event, with the prompt's tokens.
func (st *stream) messageStart(a answer) anthropicEvent {
	in := st.req.promptTokens()
	return anthropicEvent{name: "message_start", data: anthropicMessageStart{Type: "message_start", Message: anthropicMessage{
		ID: st.id, Type: "message", Role: "assistant", Model: st.req.Model, Content: []anthropicContent{},
		Usage: anthropicUsage{InputTokens: &in, OutputTokens: 1},
	}}}
}

// anthropicEvents returns the events that stream a as Anthropic does:
// message_start and a ping; for each block (the text, then each tool call)
// content_block_start, its deltas (text_delta pieces of the text, or
// input_json_delta pieces of the call's arguments) and content_block_stop;
// then message_delta with the stop reason and the output tokens, and
// message_stop.
func (st *stream) anthropicEvents(a answer) []anthropicEvent {
	events := []anthropicEvent{st.messageStart(a), {name: "ping", data: anthropicBare{Type: "ping"}}}
	block := func(index int, start anthropicContent, deltas []anthropicDelta) {
		events = append(events, anthropicEvent{name: "content_block_start", data: anthropicBlockStart{Type: "content_block_start", Index: index, ContentBlock: start}})
		for _, d := range deltas {
			events = append(events, anthropicEvent{name: "content_block_delta", delta: true, data: anthropicBlockDelta{Type: "content_block_delta", Index: index, Delta: d}})
		}
		events = append(events, anthropicEvent{name: "content_block_stop", data: anthropicBlockStop{Type: "content_block_stop", Index: index}})
	}
	index := 0
	if a.hasText() {
		var ds []anthropicDelta
		for _, p := range ReplyChunks(a.text) {
			ds = append(ds, anthropicDelta{Type: "text_delta", Text: &p})
		}
		empty := ""
		block(index, anthropicContent{Type: "text", Text: &empty}, ds)
		index++
	}
	for _, c := range a.calls {
		var ds []anthropicDelta
		for _, p := range argumentChunks(c.Arguments) {
			ds = append(ds, anthropicDelta{Type: "input_json_delta", PartialJSON: &p})
		}
		block(index, anthropicContent{Type: "tool_use", ID: c.ID, Name: c.Name, Input: json.RawMessage("{}")}, ds)
		index++
	}
	md := anthropicMessageDelta{Type: "message_delta", Usage: anthropicUsage{OutputTokens: words(a.text, a.calls)}}
	md.Delta.StopReason = a.stopReason()
	return append(events,
		anthropicEvent{name: "message_delta", data: md},
		anthropicEvent{name: "message_stop", data: anthropicBare{Type: "message_stop"}})
}

// anthropicCut sends a's events up to its chunks-th delta, and none from
// message_delta on: a stream that stops before its end.
func (st *stream) anthropicCut(a answer, chunks int) error {
	sent := 0
	for _, e := range st.anthropicEvents(a) {
		if e.name == "message_delta" || e.delta && sent >= chunks {
			return nil
		}
		if e.delta {
			sent++
		}
		if err := st.anthropicEvent(e); err != nil {
			return err
		}
	}
	return nil
}

// anthropicEvent sends e.
func (st *stream) anthropicEvent(e anthropicEvent) error {
	b, err := json.Marshal(e.data)
	if err != nil {
		return err
	}
	return st.named(e.name, string(b))
}

// named sends one event with a name ("" sends no "event:" line) and data
// (one "data:" line per line of it) and flushes it.
func (st *stream) named(name, data string) error {
	var sb strings.Builder
	if name != "" {
		fmt.Fprintf(&sb, "event: %s\n", name)
	}
	for l := range strings.SplitSeq(data, "\n") {
		fmt.Fprintf(&sb, "data: %s\n", l)
	}
	sb.WriteString("\n")
	if _, err := st.w.Write([]byte(sb.String())); err != nil {
		return err
	}
	return st.rc.Flush()
}

// anthropicMessage returns the message object of a, the answer to a request
// with stream=false. A tool call whose arguments are not JSON has them as a
// JSON string.
func (st *stream) anthropicMessage(a answer) []byte {
	m := anthropicMessage{ID: st.id, Type: "message", Role: "assistant", Model: st.req.Model, Content: []anthropicContent{}}
	if a.hasText() {
		m.Content = append(m.Content, anthropicContent{Type: "text", Text: &a.text})
	}
	for _, c := range a.calls {
		input := json.RawMessage(c.Arguments)
		if !json.Valid(input) {
			input, _ = json.Marshal(c.Arguments)
		}
		m.Content = append(m.Content, anthropicContent{Type: "tool_use", ID: c.ID, Name: c.Name, Input: input})
	}
	reason := a.stopReason()
	in := st.req.promptTokens()
	m.StopReason, m.Usage = &reason, anthropicUsage{InputTokens: &in, OutputTokens: words(a.text, a.calls)}
	b, _ := json.Marshal(m)
	return append(b, '\n')
}
