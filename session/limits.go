package session

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/openai/openai-go/v3/option"

	"github.com/retrace-go/retrace/policies"
)

// Defaults of [Limits].
const (
	// DefaultMaxEventBytes is room for an event a thousand times the size of
	// a chat-completion chunk (a few hundred bytes), and for a gateway that
	// sends a long answer as one event.
	DefaultMaxEventBytes = 1 << 20
	// DefaultMaxResponseBytes is twice a 128k-token answer streamed one
	// token per chunk at about 250 bytes a chunk.
	DefaultMaxResponseBytes = 64 << 20
	// DefaultMaxErrorBodyBytes is room for any error object a provider
	// sends, a message of hundreds of KiB before its code included (OpenAI
	// writes the message first); an error answer is decoded from at most its
	// first 1 MiB in any case, its code and type wherever they are in it.
	DefaultMaxErrorBodyBytes = 1 << 20
)

// MaxErrorText is the length in bytes beyond which [ErrorText] cuts the text
// it records, marking the cut with "…": the text goes into the history sent
// with every later request, and into errors and spans.
const MaxErrorText = 2 << 10 // the caps' table's CapTurnError; a test keeps them equal

// Limits bound how much of a provider's answer the OpenAI provider reads,
// so that a broken gateway or a hostile server cannot make it read, or hold
// in memory, more than a known amount. A zero or negative field means its
// default. They apply to every answer, whatever the HTTP client beneath.
type Limits struct {
	// MaxEventBytes bounds one server-sent event: its lines, from its first
	// byte to the newline before the blank line that ends it. The SDK holds
	// an event in memory until that blank line, so an event that never
	// ends would otherwise be read for ever. Default [DefaultMaxEventBytes].
	// Whatever it is, the SDK refuses a single line over 32 MiB.
	MaxEventBytes int64
	// MaxResponseBytes bounds a whole streamed answer. Default
	// [DefaultMaxResponseBytes].
	MaxResponseBytes int64
	// MaxErrorBodyBytes bounds what is read of the body of an error answer
	// (status 400 or more); the rest is left unread, and the error is
	// decoded from what was read. Default [DefaultMaxErrorBodyBytes].
	MaxErrorBodyBytes int64
}

// orDefaults returns l with each unset field at its default.
func (l Limits) orDefaults() Limits {
	pick := func(v, def int64) int64 {
		if v <= 0 {
			return def
		}
		return v
	}
	return Limits{
		MaxEventBytes:     pick(l.MaxEventBytes, DefaultMaxEventBytes),
		MaxResponseBytes:  pick(l.MaxResponseBytes, DefaultMaxResponseBytes),
		MaxErrorBodyBytes: pick(l.MaxErrorBodyBytes, DefaultMaxErrorBodyBytes),
	}
}

// Names of the limits: an answer past one is a Permanent *policies.Error
// whose Reason names it ("limit MaxEventBytes").
const (
	limitEvent    = "MaxEventBytes"
	limitResponse = "MaxResponseBytes"
	// limitSDKLine is the SDK's own bound on one line of an event stream
	// (32 MiB), which a MaxEventBytes above it cannot raise.
	limitSDKLine = "SDKLine"
)

// sdkLineLimit is the SDK's bound on one line (bufio.MaxScanTokenSize<<9).
const sdkLineLimit = 32 << 20

// limitExceeded is the error of an answer past a limit. It is Permanent: an
// answer that big is a broken gateway or an attack, not a blip, and retrying
// it only reads the same megabytes again, once per attempt of every layer.
// Raising the limit, or mending the gateway, is the fix.
func limitExceeded(limit string, bytes int64) error {
	typ, msg := "event_too_large", fmt.Sprintf("a line of the provider's stream is longer than the SDK allows (%d bytes)", bytes)
	switch limit {
	case limitEvent:
		msg = fmt.Sprintf("an event of the provider's stream is longer than Limits.MaxEventBytes (%d bytes)", bytes)
	case limitResponse:
		typ, msg = "response_too_large", fmt.Sprintf("the provider's answer is longer than Limits.MaxResponseBytes (%d bytes)", bytes)
	}
	return &policies.Error{Class: policies.Permanent, Type: typ, Reason: "limit " + limit, Message: msg}
}

// middleware bounds the body of every answer beneath the SDK, which reads
// error bodies whole and event streams until a blank line: an error answer's
// body is cut at MaxErrorBodyBytes, any other answer is read through an
// eventReader.
func (l Limits) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err != nil || resp == nil || resp.Body == nil {
		return resp, err
	}
	if resp.StatusCode >= 400 {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, l.MaxErrorBodyBytes), resp.Body}
		return resp, nil
	}
	resp.Body = &eventReader{body: resp.Body, maxEvent: l.MaxEventBytes, maxTotal: l.MaxResponseBytes}
	return resp, nil
}

// headBytes is how much of a line eventReader keeps to tell an "event:"
// line naming an error from the rest: "event: error\r" fits.
const headBytes = 16

// eventReader passes an event stream on while it holds the limits: it counts
// the bytes since the last blank line (the end of an event, "\n\n" or
// "\r\n\r\n", split into lines as the SDK splits them) and in all, and fails
// with a limit's error past either, having read at most one byte more than
// the limit. It also ends the stream at an event named "error" (an "event:
// error" line) with that event's error: the SDK recognises an error event by
// an "error" member in its data only, and would take any other for a chunk.
// Such an event's data is kept from its "event:" line on, the order servers
// send them in.
type eventReader struct {
	body               io.ReadCloser
	maxEvent, maxTotal int64
	total              int64 // bytes passed on
	event              int64 // bytes of the current event so far
	line               int   // bytes of the current line so far
	head               [headBytes]byte
	errorEvent         bool   // the current event is named "error"
	cur, data          []byte // an error event's current line, and its data
	err                error  // the failure, returned by every later Read
}

func (r *eventReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	// Read no more than one byte past either limit, so that the limits bound
	// what is read from the network, not only what is passed on.
	if room := min(r.maxEvent-r.counted(), r.maxTotal-r.total) + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := r.body.Read(p)
	k, serr := r.scan(p[:n])
	if serr == nil && err == io.EOF && r.errorEvent {
		// The stream ended inside an error event: that error ends it.
		k, serr = bytes.LastIndexByte(p[:n], '\n')+1, eventError(r.data)
		if k == len(p) {
			k-- // no room for the space after the line: cut its newline instead
		}
	}
	if serr != nil {
		r.err = serr
		return failAt(p, k), serr
	}
	return n, err
}

// failAt returns how much of p to pass on with the error: the k bytes before
// the line in which it arose, and a space. The SDK's scanner takes the bytes
// it holds at an error for a last line, and a lone "\r" would be a blank
// line to it, which ends the event the error cuts short; with the space
// after it, the last line is one the SDK ignores, or the unfinished end of
// a line that no blank line follows.
func failAt(p []byte, k int) int {
	p[k] = ' '
	return k + 1
}

func (r *eventReader) Close() error { return r.body.Close() }

// counted is the size of the current event, a lone "\r" that may begin its
// blank line left out.
func (r *eventReader) counted() int64 {
	if r.line == 1 && r.head[0] == '\r' {
		return r.event - 1
	}
	return r.event
}

// scan accounts for p, the bytes just read. On a failure it returns it with
// the offset in p of the line, or the piece of a line, in which it arose.
func (r *eventReader) scan(p []byte) (int, error) {
	for done := 0; done < len(p); {
		rest := p[done:]
		i := bytes.IndexByte(rest, '\n')
		seg := rest
		if i >= 0 {
			seg = rest[:i]
		}
		r.add(seg)
		if err := r.check(); err != nil {
			return done, err
		}
		if i < 0 {
			break
		}
		if err := r.endLine(); err != nil {
			return done, err
		}
		if err := r.check(); err != nil {
			return done, err
		}
		done += i + 1
	}
	return len(p), nil
}

// add accounts for seg, a piece of the current line without its newline.
func (r *eventReader) add(seg []byte) {
	if r.line < headBytes {
		copy(r.head[r.line:], seg)
	}
	if r.errorEvent {
		r.cur = append(r.cur, seg...)
	}
	r.line += len(seg)
	r.event += int64(len(seg))
	r.total += int64(len(seg))
}

func (r *eventReader) check() error {
	switch {
	case r.counted() > r.maxEvent:
		return limitExceeded(limitEvent, r.maxEvent)
	case r.total > r.maxTotal:
		return limitExceeded(limitResponse, r.maxTotal)
	}
	return nil
}

// endLine accounts for the newline that ends the current line: at a blank
// line, the end of an event; at an "event:" line, the event's name; at a
// "data:" line of an error event, its data.
func (r *eventReader) endLine() error {
	blank := r.line == 0 || r.line == 1 && r.head[0] == '\r'
	var line []byte // the whole line, when it is short or kept
	switch {
	case r.errorEvent:
		line = r.cur
	case r.line <= headBytes:
		line = r.head[:r.line]
	}
	r.line, r.cur = 0, r.cur[:0]
	r.total++
	if blank {
		if r.errorEvent {
			return eventError(r.data)
		}
		r.event, r.data = 0, r.data[:0]
		return nil
	}
	r.event++
	// The fields as the SDK reads them: the name up to the first colon, the
	// value after it without one leading space, a trailing "\r" dropped.
	name, value, _ := bytes.Cut(bytes.TrimSuffix(line, []byte("\r")), []byte(":"))
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	switch string(name) {
	case "event":
		r.errorEvent = string(value) == "error"
	case "data":
		if r.errorEvent {
			r.data = append(append(r.data, value...), '\n')
		}
	}
	return nil
}

// eventError is the error an error event reports, decoded by the one
// decoder of provider answers (policies.ErrorEventFrom), so that it is
// classified exactly as its HTTP twin, by its code or type
// (insufficient_quota is Fatal, server_error Transient,
// context_length_exceeded a context overflow), and as the same event read by
// a user's own SDK client is. An error event that no rule knows is
// Transient: the provider took the request and failed on its side midway,
// as a dropped stream does.
func eventError(data []byte) error { return policies.ErrorEventFrom(data) }
