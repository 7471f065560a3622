package faultserver

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
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

type errorBody struct {
	Error apiError `json:"error"`
}

type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
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
	Role    string `json:"role"`
	Content string `json:"content"`
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

// writeError sends f's status and OpenAI error body.
func writeError(w http.ResponseWriter, status int, f Fault) {
	body := errorBody{Error: apiError{Message: f.Message, Type: f.Type}}
	if f.Code != "" {
		body.Error.Code = &f.Code
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// respond answers req with f.
func respond(w http.ResponseWriter, r *http.Request, req Request, f Fault) {
	for k, vs := range f.Header {
		w.Header()[k] = append([]string(nil), vs...)
	}
	st := stream{w: w, rc: http.NewResponseController(w), req: req, id: fmt.Sprintf("chatcmpl-%d", req.Index), created: time.Now().Unix()}
	reply := f.reply()
	switch f.Kind {
	case KindError:
		writeError(w, f.status(), f)
	case KindHang:
		<-r.Context().Done()
		panic(http.ErrAbortHandler)
	case KindBadJSON:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("<html>gateway error</html>\n"))
	case KindMalformed:
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"id": %q, "object": "chat.completion", "choices": [`, st.id)
			return
		}
		st.begin()
		pieces := ReplyChunks(reply)
		if st.content(pieces[0], true) != nil || st.raw(`{"id": "x", "choices": [`) != nil {
			return
		}
		_ = st.raw("[DONE]")
	case KindStreamReset, KindStreamEOF:
		if req.Stream {
			st.begin()
			for i, p := range ReplyChunks(reply) {
				if i >= f.Chunks || st.content(p, i == 0) != nil {
					break
				}
			}
		} else {
			w.Header().Set("Content-Type", "application/json")
			b := st.completion(reply)
			_, _ = w.Write(b[:len(b)/2])
			_ = st.rc.Flush()
		}
		if f.Kind == KindStreamReset {
			reset(st.rc)
		}
	default:
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(st.completion(reply))
			return
		}
		st.begin()
		for i, p := range ReplyChunks(reply) {
			if st.content(p, i == 0) != nil {
				return
			}
		}
		stop := "stop"
		if st.event(chunk{Choices: []chunkChoice{{FinishReason: &stop}}}) != nil {
			return
		}
		if req.IncludeUsage {
			u := usage{PromptTokens: req.promptTokens(), CompletionTokens: len(strings.Fields(reply))}
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
			if st.event(chunk{Choices: []chunkChoice{}, Usage: &u}) != nil {
				return
			}
		}
		_ = st.raw("[DONE]")
	}
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

// content sends a content chunk; the first also carries the role.
func (st *stream) content(text string, first bool) error {
	d := delta{Content: &text}
	if first {
		d.Role = "assistant"
	}
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

// completion returns the chat.completion body for reply.
func (st *stream) completion(reply string) []byte {
	u := usage{PromptTokens: st.req.promptTokens(), CompletionTokens: len(strings.Fields(reply))}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	b, _ := json.Marshal(completion{
		ID: st.id, Object: "chat.completion", Created: st.created, Model: st.req.Model,
		Choices: []choice{{Message: message{Role: "assistant", Content: reply}, FinishReason: "stop"}},
		Usage:   u,
	})
	return append(b, '\n')
}
