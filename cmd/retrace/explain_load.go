package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// defaultMaxBytes is -max-bytes' default: a trace of a few thousand spans
// is a few megabytes, and reading 64 MiB of OTLP JSON takes about a
// gigabyte of memory at most.
const defaultMaxBytes = 64 << 20

// byteSize is a flag's size in bytes, written as a count of bytes or with a
// binary unit: 512KiB, 64MiB, 1GiB.
type byteSize int64

type sizeUnit struct {
	suffix string
	shift  uint
}

// sizeUnits are the units a byteSize is written in, largest first.
func sizeUnits() []sizeUnit { return []sizeUnit{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}} }

func (b *byteSize) Set(s string) error {
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range sizeUnits() {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, shift = strings.TrimSpace(n), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)>>shift {
		return fmt.Errorf("want a size above 0, such as 64MiB or 1GiB, got %q", s)
	}
	*b = byteSize(n << shift)
	return nil
}

func (b byteSize) String() string {
	for _, u := range sizeUnits() {
		if m := int64(1) << u.shift; int64(b) >= m && int64(b)%m == 0 {
			return strconv.FormatInt(int64(b)/m, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// tooLargeError is an input larger than -max-bytes: explain read up to the
// limit and stopped, rather than analyse a trace cut short.
type tooLargeError struct {
	limit byteSize
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("larger than %s, the most explain reads (-max-bytes %s): raise it to read this, e.g. -max-bytes %s",
		e.limit, e.limit, max(2*e.limit, e.limit)) // the larger: twice the largest limit overflows
}

// capped reads r up to limit bytes and fails with a *tooLargeError when r
// holds more: a read past the limit probes for one more byte, so an input
// of exactly limit bytes is read whole and a longer one is never taken for
// a shorter one that ended.
type capped struct {
	r    io.Reader
	left int64
	err  *tooLargeError
}

func newCapped(r io.Reader, limit byteSize) *capped {
	return &capped{r: r, left: int64(limit), err: &tooLargeError{limit: limit}}
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var probe [1]byte
		n, err := io.ReadAtLeast(c.r, probe[:], 1)
		if n > 0 {
			return 0, c.err
		}
		return 0, err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// readOTLP reads OTLP JSON from r, at most limit bytes. Past the limit it
// returns the *tooLargeError alone: the decoder's view of the cut (an
// unexpected EOF) would mislead.
func readOTLP(r io.Reader, limit byteSize) ([]*tracepb.ResourceSpans, error) {
	rs, err := setup.ReadOTLPJSON(newCapped(r, limit))
	if tl := (*tooLargeError)(nil); errors.As(err, &tl) {
		return nil, tl
	}
	return rs, err
}

// jaegerQuery is how explain asks Jaeger for a trace.
type jaegerQuery struct {
	base     string
	id       string
	timeout  time.Duration
	maxBytes byteSize
}

// fetchJaeger reads one trace from Jaeger's query API (v3), which answers
// with OTLP JSON. The timeout covers the whole exchange, the answer's body
// too.
func fetchJaeger(ctx context.Context, q jaegerQuery) ([]*tracepb.ResourceSpans, error) {
	u, err := url.Parse(strings.TrimRight(q.base, "/"))
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("-jaeger %q: want the query service's URL, such as http://localhost:16686", q.base)
	}
	u = u.JoinPath("api", "v3", "traces", q.id)
	ctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	rs, err := askJaeger(ctx, u.String(), q)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("jaeger: no whole answer within %s (-timeout %s): raise -timeout, or check %s: %w", q.timeout, q.timeout, q.base, err)
	}
	return rs, err
}

func askJaeger(ctx context.Context, u string, q jaegerQuery) ([]*tracepb.ResourceSpans, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jaeger: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Only a few words of an error's body are shown: the limit is
		// the message's, not the trace's.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("jaeger has no trace %s (%s)", q.id, printable(strings.TrimSpace(string(body))))
		}
		return nil, fmt.Errorf("jaeger: %s: %s", printable(resp.Status), printable(strings.TrimSpace(string(body))))
	}
	if resp.ContentLength > int64(q.maxBytes) {
		return nil, fmt.Errorf("jaeger's answer for trace %s: %w", q.id, &tooLargeError{limit: q.maxBytes})
	}
	rs, err := readOTLP(resp.Body, q.maxBytes)
	if err != nil {
		return nil, fmt.Errorf("jaeger's answer for trace %s: %w", q.id, err)
	}
	return rs, nil
}

// readFile reads the OTLP JSON of a file, at most limit bytes: the demo's
// -otlp-file, a Collector file exporter's output, or a saved Jaeger answer.
func readFile(path string, limit byteSize) ([]*tracepb.ResourceSpans, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rs, err := readOTLP(f, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rs, nil
}

// pickTrace returns the spans of trace id, or, with no id, of the only
// trace there is. from names where they came from, for the errors.
func pickTrace(rs []*tracepb.ResourceSpans, id, from string) ([]sdktrace.ReadOnlySpan, error) {
	order, byTrace, err := splitTraces(rs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	if id != "" {
		spans, ok := byTrace[strings.ToLower(id)]
		if !ok {
			return nil, fmt.Errorf("no trace %s in %s, which holds %s", id, from, listTraces(order, byTrace))
		}
		return spans, nil
	}
	switch len(order) {
	case 0:
		return nil, fmt.Errorf("%s holds no spans", from)
	case 1:
		return byTrace[order[0]], nil
	}
	return nil, fmt.Errorf("pass -trace ID: %s holds %s", from, listTraces(order, byTrace))
}

// splitTraces groups the spans by trace: the trace IDs (hex) in the order
// their first span came, and each trace's spans in the order they came,
// every text made printable (see printableSpan).
func splitTraces(rs []*tracepb.ResourceSpans) (order []string, byTrace map[string][]sdktrace.ReadOnlySpan, err error) {
	spans, err := setup.ReadOnlySpans(rs)
	if err != nil {
		return nil, nil, err
	}
	byTrace = map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		tid := s.SpanContext().TraceID().String()
		if _, ok := byTrace[tid]; !ok {
			order = append(order, tid)
		}
		byTrace[tid] = append(byTrace[tid], printableSpan(s))
	}
	return order, byTrace, nil
}

// maxListed is the most traces an error lists one by one; past it, traces
// whose roots are alike (see describeRoot) are listed once, with a count.
const maxListed = 20

// listTraces counts the traces and names each by its root, one a line, in
// the order they came, so that a person can tell them apart.
func listTraces(order []string, byTrace map[string][]sdktrace.ReadOnlySpan) string {
	type group struct {
		id, about string
		more      int
	}
	var groups []*group
	byKind := map[string]*group{}
	for _, tid := range order {
		about, kind := describeRoot(byTrace[tid])
		if len(order) > maxListed {
			if g, ok := byKind[kind]; ok {
				g.more++
				continue
			}
		}
		g := &group{id: tid, about: about}
		byKind[kind] = g
		groups = append(groups, g)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", plural(len(order), "trace"))
	for i, g := range groups {
		if i == maxListed {
			rest := 0
			for _, h := range groups[i:] {
				rest += 1 + h.more
			}
			fmt.Fprintf(&b, "\n  … and %s with %s of root", plural(rest, "more trace"), plural(len(groups)-i, "other kind"))
			break
		}
		id := g.id
		if id == "" {
			id = "(no trace ID)"
		}
		fmt.Fprintf(&b, "\n  %s  %s", id, g.about)
		if g.more > 0 {
			fmt.Fprintf(&b, "  (and %d more like it)", g.more)
		}
	}
	return b.String()
}

// describeRoot names a trace by its root (the earliest span without a
// parent, else the earliest span): its name, outcome, calls, worst case,
// start time and spans; and its kind, all of those but the start time, by
// which alike traces are grouped.
func describeRoot(spans []sdktrace.ReadOnlySpan) (about, kind string) {
	isRoot := func(s sdktrace.ReadOnlySpan) bool { return !s.Parent().IsValid() }
	var root sdktrace.ReadOnlySpan
	for _, s := range spans {
		if root == nil || isRoot(s) && !isRoot(root) || isRoot(s) == isRoot(root) && s.StartTime().Before(root.StartTime()) {
			root = s
		}
	}
	parts := []string{root.Name()}
	for _, k := range []attribute.Key{telemetry.Outcome, telemetry.Calls, telemetry.CallsWorstCase} {
		for _, kv := range root.Attributes() {
			if kv.Key != k {
				continue
			}
			if k == telemetry.Outcome {
				parts = append(parts, kv.Value.AsString())
			} else {
				parts = append(parts, strings.TrimPrefix(string(k), "retrace.")+"="+kv.Value.String())
			}
			break
		}
	}
	parts = append(parts, plural(len(spans), "span"))
	kind = strings.Join(parts, ", ")
	parts = append(parts, "started "+root.StartTime().UTC().Format("2006-01-02 15:04:05.000 UTC"))
	return strings.Join(parts, ", "), kind
}

// printableSpan is s with every text it holds made printable (see
// printable): its name, status, string attributes and events, so that the
// tree is printed as the console exporter prints it and no text of the
// file reaches the terminal as it was.
func printableSpan(s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	st := tracetest.SpanStubFromReadOnlySpan(s)
	st.Name = printable(st.Name)
	st.Status.Description = printable(st.Status.Description)
	st.Attributes = printableAttrs(st.Attributes)
	for i := range st.Events {
		st.Events[i].Name = printable(st.Events[i].Name)
		st.Events[i].Attributes = printableAttrs(st.Events[i].Attributes)
	}
	return st.Snapshot()
}

func printableAttrs(kvs []attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, len(kvs))
	for i, kv := range kvs {
		switch kv.Value.Type() {
		case attribute.STRING:
			kv.Value = attribute.StringValue(printable(kv.Value.AsString()))
		case attribute.STRINGSLICE:
			ss := kv.Value.AsStringSlice()
			for j := range ss {
				ss[j] = printable(ss[j])
			}
			kv.Value = attribute.StringSliceValue(ss)
		}
		out[i] = kv
	}
	return out
}

// printable returns s with every control character (a newline, an escape
// sequence's ESC, a carriage return) and every bidirectional override
// written as a Go escape (\x1b, \u202e). A trace is untrusted text printed
// to a terminal: one row per span holds only while no name breaks its
// line, and no span may rewrite what the terminal shows.
func printable(s string) string {
	clean := func(r rune) bool { return !unicode.IsControl(r) && !unicode.Is(unicode.Bidi_Control, r) }
	if !strings.ContainsFunc(s, func(r rune) bool { return !clean(r) }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case clean(r):
			b.WriteRune(r)
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}
