package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"

	"github.com/retrace-go/retrace/policies"
)

// tracedBody is a successful answer's body as the caller reads it. It ends
// the request's span when the body is read to its end or closed, so that
// the span covers the answer and records how it ended; and it watches an
// event stream for its terminator, so that a stream that ends without one
// (a dropped connection that closed cleanly, a proxy that cut it) fails the
// reader with a *policies.Error of type stream_dropped instead of passing for a short
// answer. It never changes the bytes read.
type tracedBody struct {
	rc  io.ReadCloser
	ctx context.Context // the request's: its end is the caller's, not the stream's fault
	sse *sseWatch       // nil unless the body is an event stream
	mu  sync.Mutex      // guards end, and sse against a Close beside a Read
	end func(err error) // ends the request's span; nil once called
	// event is told of the stream's error event, once; may be nil.
	event func(err error)
}

// wrapBody wraps resp's body; end, if not nil, is called once when the
// body ends, with the failure it ended with (nil for a complete answer), and
// event, if not nil, when an error event has arrived in the stream.
func wrapBody(ctx context.Context, resp *http.Response, end, event func(error)) {
	if resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		if end != nil {
			end(nil)
		}
		return
	}
	b := &tracedBody{rc: resp.Body, ctx: ctx, end: end, event: event}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == "text/event-stream" {
		b.sse = &sseWatch{}
	}
	resp.Body = b
}

func (b *tracedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if b.sse != nil && n > 0 {
		b.mu.Lock()
		had := b.sse.errData != nil
		b.sse.feed(p[:n])
		event := b.event
		if had || b.sse.errData == nil {
			event = nil
		}
		b.mu.Unlock()
		if event != nil {
			event(b.reported())
		}
	}
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, io.EOF):
		b.mu.Lock()
		complete := b.sse == nil || b.sse.complete()
		b.mu.Unlock()
		if !complete {
			err = policies.StreamDropped("", fmt.Errorf("%w: the event stream ended %s", io.ErrUnexpectedEOF, b.sse.missing()))
			b.finish(err)
			return n, err
		}
		b.finish(b.reported())
		return n, io.EOF
	case b.ctx.Err() != nil:
		b.finish(err) // the caller's end, or its deadline's
		return n, err
	}
	if b.sse != nil && !alreadyClassified(err) {
		// The stream broke after it began: dropped, however the read
		// failed, as a provider reading it names it.
		err = policies.StreamDropped("", err)
	}
	b.finish(err)
	return n, err
}

// alreadyClassified reports whether err is one of retrace's own errors,
// which say what they are (a limit passed, an error event a provider's
// limits decoded): they reach the reader as they are.
func alreadyClassified(err error) bool {
	_, ok := errors.AsType[*policies.Error](err)
	return ok
}

// Close closes the body. A body closed before its end was given up by its
// reader: the request did not fail.
func (b *tracedBody) Close() error {
	err := b.rc.Close()
	b.finish(b.reported())
	return err
}

// reported is the error event the stream sent, decoded, or nil.
func (b *tracedBody) reported() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sse == nil || b.sse.errData == nil {
		return nil
	}
	return policies.ErrorEventFrom(b.sse.errData)
}

func (b *tracedBody) finish(err error) {
	b.mu.Lock()
	end := b.end
	b.end = nil
	b.mu.Unlock()
	if end != nil {
		end(err)
	}
}

// sseWatch follows an event stream's lines as they are read, to know whether
// it ended with its protocol's terminator: OpenAI chat completions' data
// [DONE], Anthropic's message_stop, the Responses API's response.completed
// (or .failed, .incomplete). A stream of a protocol it does not know is
// complete when it ends after any event; an empty one never is.
type sseWatch struct {
	line     []byte // the line being read, up to maxWatchedLine bytes
	long     bool   // the line passed maxWatchedLine: its content is not looked at
	event    string // the current event's name
	data     []byte // the current event's data, up to maxWatchedLine bytes
	events   int
	protocol string // "openai", "anthropic", "responses", or "" while unknown
	done     bool   // the terminator arrived
	errData  []byte // the first error event's data: the SDK reports it
}

// maxWatchedLine bounds what is kept of one line or event: a terminator or
// an error event is short, and an event of any size must not grow memory.
const maxWatchedLine = 64 << 10

// feed reads p's lines.
func (w *sseWatch) feed(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !w.long {
			if len(w.line)+len(chunk) > maxWatchedLine {
				w.long, w.line = true, w.line[:0]
			} else {
				w.line = append(w.line, chunk...)
			}
		}
		if i < 0 {
			return
		}
		p = p[i+1:]
		w.lineDone()
	}
}

// lineDone handles one whole line.
func (w *sseWatch) lineDone() {
	line := bytes.TrimSuffix(w.line, []byte("\r"))
	long := w.long
	w.line, w.long = w.line[:0], false
	if len(line) == 0 && !long {
		w.dispatch()
		return
	}
	if long {
		w.data = append(w.data[:0], 'x') // an event with data too long to look at
		return
	}
	field, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(field) {
	case "event":
		w.event = string(value)
	case "data":
		if len(w.data) > 0 {
			w.data = append(w.data, '\n')
		}
		if len(w.data)+len(value) <= maxWatchedLine {
			w.data = append(w.data, value...)
		}
	}
}

// dispatch ends an event.
func (w *sseWatch) dispatch() {
	event, data := w.event, w.data
	w.event, w.data = "", w.data[:0]
	if event == "" && len(data) == 0 {
		return
	}
	w.events++
	if w.protocol == "" {
		switch {
		case event == "message_start" || bytes.Contains(data, []byte(`"type":"message_start"`)):
			w.protocol = "anthropic"
		case len(event) > 9 && event[:9] == "response.":
			w.protocol = "responses"
		case bytes.Contains(data, []byte("chat.completion.chunk")):
			w.protocol = "openai"
		}
	}
	switch {
	case bytes.HasPrefix(data, []byte("[DONE]")),
		event == "message_stop", bytes.Contains(data, []byte(`"type":"message_stop"`)),
		event == "response.completed", event == "response.failed", event == "response.incomplete":
		w.done = true
	case (event == "error" || isErrorData(data)) && w.errData == nil:
		w.errData = bytes.Clone(data)
	}
}

// isErrorData reports whether an event's data is an error object:
// {"error": …} (OpenAI's) or {"type": "error", …} (Anthropic's).
func isErrorData(data []byte) bool {
	if !bytes.Contains(data, []byte(`"error"`)) {
		return false
	}
	var probe struct {
		Error json.RawMessage `json:"error"`
		Type  string          `json:"type"`
	}
	return json.Unmarshal(data, &probe) == nil && (len(probe.Error) > 0 && string(probe.Error) != "null" || probe.Type == "error")
}

// complete reports whether the stream, ending now, said all it meant to.
func (w *sseWatch) complete() bool {
	if len(w.line) > 0 || w.long {
		w.lineDone() // the last line, without its newline
	}
	if len(w.data) > 0 || w.event != "" {
		w.dispatch() // an event without its blank line counts as sent
	}
	switch {
	case w.done || w.errData != nil:
		return true
	case w.protocol != "":
		return false
	}
	return w.events > 0
}

// missing says what the stream lacked.
func (w *sseWatch) missing() string {
	switch w.protocol {
	case "openai":
		return "without [DONE]"
	case "anthropic":
		return "without message_stop"
	case "responses":
		return "without response.completed"
	}
	return "without an event"
}

// keepUntilRead hands cancel, the end of an attempt's context, to resp's
// body when resp is an HTTP answer with one: the body is read from the
// attempt's connection, so the attempt lasts until the body has been read to
// its end or closed (and its timeout still bounds it), not only until the
// headers came.
func keepUntilRead(r *http.Response, cancel context.CancelFunc) bool {
	if r == nil || r.Body == nil || r.Body == http.NoBody {
		return false
	}
	r.Body = &cancelAtEnd{ReadCloser: r.Body, cancel: cancel}
	return true
}

// cancelAtEnd is a body that ends its attempt's context when it is read to
// its end, fails, or is closed.
type cancelAtEnd struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelAtEnd) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.cancel()
	}
	return n, err
}

func (b *cancelAtEnd) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
