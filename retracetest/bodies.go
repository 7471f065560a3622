package retracetest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
)

// filler is what huge answers are made of: written over and over, so that
// an answer of any size costs the server one small buffer.
var filler = bytes.Repeat([]byte("x"), 32<<10)

// fill writes n filler bytes to w, stopping early when a write fails or ctx
// ends (the client hung up, or the server is closing).
func fill(ctx context.Context, w http.ResponseWriter, n int64) error {
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := w.Write(filler[:min(n, int64(len(filler)))])
		n -= int64(m)
		if err != nil {
			return err
		}
	}
	return nil
}

// writeHugeError sends f's status and an error body of f.Size bytes in
// dialect d's shape: the object's type (and OpenAI's code) first, then a
// message of filler that makes up the size (a body too small for them is
// cut).
func writeHugeError(ctx context.Context, w http.ResponseWriter, d dialect, f Fault) {
	e := f.in(d)
	head := fmt.Sprintf(`{"error":{"type":%q,"code":%q,"message":"`, e.typ, e.code)
	if d == anthropicDialect {
		head = fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":"`, e.typ)
	}
	const tail = `"}}`
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	if f.Size <= int64(len(head)+len(tail)) {
		_, _ = w.Write([]byte((head + tail)[:max(f.Size, 0)]))
		return
	}
	if _, err := w.Write([]byte(head)); err != nil {
		return
	}
	if fill(ctx, w, f.Size-int64(len(head)+len(tail))) != nil {
		return
	}
	_, _ = w.Write([]byte(tail))
}

// hugeEvent sends one event of size bytes that never ends: "data:" lines
// of lineBytes bytes each, newline included, the last one possibly cut short,
// or a single line without a newline when lineBytes is too small for a line;
// no blank line.
func (st *stream) hugeEvent(ctx context.Context, size int64, lineBytes int) {
	line := int64(lineBytes)
	oneLine := line <= int64(len("data: x\n"))
	if oneLine {
		line = size
	}
	for left := size; left > 0; {
		n := min(line, left)
		left -= n
		if st.dataLine(ctx, n, !oneLine) != nil {
			return
		}
	}
	_ = st.rc.Flush()
}

// dataLine sends a "data:" line of n bytes of filler, cut to n bytes, its
// last byte a newline when newline is set.
func (st *stream) dataLine(ctx context.Context, n int64, newline bool) error {
	prefix := "data: "[:min(n, 6)]
	if _, err := io.WriteString(st.w, prefix); err != nil {
		return err
	}
	n -= int64(len(prefix))
	if !newline || n == 0 {
		return fill(ctx, st.w, n)
	}
	if err := fill(ctx, st.w, n-1); err != nil {
		return err
	}
	_, err := io.WriteString(st.w, "\n")
	return err
}

// errorEvent sends f's error event in dialect d: Body as its data when set,
// else f's error object in d's words, after an "event:" line with f.Event,
// or with d's name for an error event when f.Event is empty.
func (st *stream) errorEvent(d dialect, f Fault) error {
	data := f.Body
	if data == "" {
		data = string(f.in(d).body(d))
	}
	return st.named(cmp.Or(f.Event, d.errorEventName()), data)
}
