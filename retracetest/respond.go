package retracetest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"
	"unicode"
)

// ReplyChunks splits text into the content pieces a stream sends: one per
// word, each piece carrying the whitespace before its word, the last one
// also the trailing whitespace, so that the pieces concatenate to text. A
// text without words is one piece.
func ReplyChunks(text string) []string {
	var chunks []string
	start, inWord := 0, false
	for i, r := range text {
		space := unicode.IsSpace(r)
		if space && inWord {
			// A word ends at i; the next piece begins with this whitespace.
			chunks = append(chunks, text[start:i])
			start = i
		}
		inWord = !space
	}
	if !inWord && len(chunks) > 0 {
		// Trailing whitespace belongs to the last word.
		chunks[len(chunks)-1] += text[start:]
		return chunks
	}
	return append(chunks, text[start:])
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []toolCallDelta `json:"tool_calls,omitempty"`
}

// toolCallDelta is a piece of a streamed tool call: the first piece of a
// call carries its ID, type and name, the next ones pieces of its arguments.
type toolCallDelta struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function functionDelta `json:"function"`
}

type functionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type chunkChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

type message struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
}

type choice struct {
	Index        int     `json:"index"`
	Message      message `json:"message"`
	FinishReason string  `json:"finish_reason"`
}

type completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   usage    `json:"usage"`
}

// respond answers req with f.
func respond(w http.ResponseWriter, r *http.Request, req Request, f Fault) {
	for k, vs := range f.Header {
		w.Header()[k] = append([]string(nil), vs...)
	}
	st := stream{w: w, rc: http.NewResponseController(w), req: req, id: fmt.Sprintf("chatcmpl-%d", req.Index), created: time.Now().Unix()}
	a := answer{text: f.text(), calls: f.toolCalls(req.Index)}
	switch f.kind {
	case kindError:
		writeError(w, openAIDialect, f.in(openAIDialect))
	case kindHang:
		<-r.Context().Done()
		panic(http.ErrAbortHandler)
	case kindBadJSON:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("<html>gateway error</html>\n"))
	case kindRawError:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status())
		_, _ = w.Write([]byte(f.Body))
	case kindHugeError:
		writeHugeError(r.Context(), w, openAIDialect, f)
	case kindHugeEvent:
		st.begin()
		st.hugeEvent(r.Context(), f.Size, f.LineBytes)
	case kindErrorEvent:
		if !req.Stream {
			writeError(w, openAIDialect, f.in(openAIDialect))
			return
		}
		st.begin()
		for i, d := range a.deltas() {
			if i >= f.Chunks || st.delta(d) != nil {
				break
			}
		}
		_ = st.errorEvent(openAIDialect, f)
	case kindMalformed:
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"id": %q, "object": "chat.completion", "choices": [`, st.id)
			return
		}
		st.begin()
		if st.delta(a.deltas()[0]) != nil || st.raw(`{"id": "x", "choices": [`) != nil {
			return
		}
		_ = st.raw("[DONE]")
	case kindStreamReset, kindStreamEOF:
		if req.Stream {
			st.begin()
			for i, d := range a.deltas() {
				if i >= f.Chunks || st.delta(d) != nil {
					break
				}
			}
		} else {
			w.Header().Set("Content-Type", "application/json")
			b := st.completion(a)
			_, _ = w.Write(b[:len(b)/2])
			_ = st.rc.Flush()
		}
		if f.kind == kindStreamReset {
			reset(st.rc)
		}
	default:
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(st.completion(a))
			return
		}
		st.begin()
		for _, d := range a.deltas() {
			if st.delta(d) != nil {
				return
			}
		}
		reason := a.finishReason()
		if st.event(chunk{Choices: []chunkChoice{{FinishReason: &reason}}}) != nil {
			return
		}
		if req.IncludeUsage {
			u := st.usageOf(a)
			if st.event(chunk{Choices: []chunkChoice{}, Usage: &u}) != nil {
				return
			}
		}
		_ = st.raw("[DONE]")
	}
}

// answer is what a success says: a text, tool calls, or both.
type answer struct {
	text  string
	calls []ToolCall // with their defaults filled in
}

// deltas returns the deltas that stream the answer, at least one: a content
// delta for each piece of the text (none for an empty text followed by tool
// calls), then for each tool call a delta with its ID, type, name and empty
// arguments followed by deltas with pieces of its arguments. The first delta
// carries the role.
func (a answer) deltas() []delta {
	var ds []delta
	if a.text != "" || len(a.calls) == 0 {
		for _, p := range ReplyChunks(a.text) {
			ds = append(ds, delta{Content: &p})
		}
	}
	for i, c := range a.calls {
		ds = append(ds, delta{ToolCalls: []toolCallDelta{{Index: i, ID: c.ID, Type: c.Type, Function: functionDelta{Name: c.Name}}}})
		for _, p := range argumentChunks(c.Arguments) {
			ds = append(ds, delta{ToolCalls: []toolCallDelta{{Index: i, Function: functionDelta{Arguments: p}}}})
		}
	}
	ds[0].Role = "assistant"
	return ds
}

// finishReason returns "tool_calls" for an answer with tool calls and "stop"
// otherwise.
func (a answer) finishReason() string {
	if len(a.calls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

// argumentChunks splits arguments at rune boundaries into up to three
// non-empty pieces of about equal length that concatenate to it.
func argumentChunks(arguments string) []string {
	runes := []rune(arguments)
	n := min(3, len(runes))
	if n == 0 {
		return []string{""}
	}
	pieces := make([]string, 0, n)
	start := 0
	for i := 1; i <= n; i++ {
		end := len(runes) * i / n
		pieces = append(pieces, string(runes[start:end]))
		start = end
	}
	return pieces
}

// reset hijacks the connection and closes it with a TCP reset.
func reset(rc *http.ResponseController) {
	conn, _, err := rc.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// stream writes server-sent events for one request.
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	req     Request
	id      string
	created int64
}

// begin sends the status and the event-stream headers.
func (st *stream) begin() {
	h := st.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	st.w.WriteHeader(http.StatusOK)
	_ = st.rc.Flush()
}

// delta sends a chunk with d.
func (st *stream) delta(d delta) error {
	return st.event(chunk{Choices: []chunkChoice{{Delta: d}}})
}

// event sends c as a chat.completion.chunk.
func (st *stream) event(c chunk) error {
	c.ID, c.Object, c.Created, c.Model = st.id, "chat.completion.chunk", st.created, st.req.Model
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return st.raw(string(b))
}

// raw sends one event with the given data and flushes it.
func (st *stream) raw(data string) error {
	if _, err := fmt.Fprintf(st.w, "data: %s\n\n", data); err != nil {
		return err
	}
	return st.rc.Flush()
}

// usageOf returns the token usage of the request and its answer a.
func (st *stream) usageOf(a answer) usage {
	u := usage{PromptTokens: st.req.promptTokens(), CompletionTokens: words(a.text, a.calls)}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// completion returns the chat.completion body for a; its content is null
// when a has no text.
func (st *stream) completion(a answer) []byte {
	m := message{Role: "assistant"}
	if a.text != "" || len(a.calls) == 0 {
		m.Content = &a.text
	}
	for _, c := range a.calls {
		m.ToolCalls = append(m.ToolCalls, wireToolCall{ID: c.ID, Type: c.Type, Function: wireFunction{Name: c.Name, Arguments: c.Arguments}})
	}
	b, _ := json.Marshal(completion{
		ID: st.id, Object: "chat.completion", Created: st.created, Model: st.req.Model,
		Choices: []choice{{Message: m, FinishReason: a.finishReason()}},
		Usage:   st.usageOf(a),
	})
	return append(b, '\n')
}
