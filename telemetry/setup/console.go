package setup

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/instrument"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/telemetry"
)

// ConsoleExporter prints each finished trace as an indented tree that a
// person can read in a terminal: name, duration, attempt, class, outcome and
// diagnosis. It holds a trace's spans until its local root ends; Shutdown and
// ForceFlush print what is left. It is safe for concurrent use.
type ConsoleExporter struct {
	mu      sync.Mutex
	w       io.Writer
	pending map[trace.TraceID][]sdktrace.ReadOnlySpan
}

// NewConsoleExporter returns an exporter that writes trees to w.
func NewConsoleExporter(w io.Writer) *ConsoleExporter {
	return &ConsoleExporter{w: w, pending: map[trace.TraceID][]sdktrace.ReadOnlySpan{}}
}

// ExportSpans implements sdktrace.SpanExporter.
func (e *ConsoleExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range spans {
		id := s.SpanContext().TraceID()
		e.pending[id] = append(e.pending[id], s)
		if !s.Parent().IsValid() || s.Parent().IsRemote() {
			if err := WriteTree(e.w, e.pending[id]); err != nil {
				return err
			}
			delete(e.pending, id)
		}
	}
	return nil
}

// ForceFlush prints the traces whose root has not ended yet.
func (e *ConsoleExporter) ForceFlush(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, spans := range e.pending {
		if err := WriteTree(e.w, spans); err != nil {
			return err
		}
		delete(e.pending, id)
	}
	return nil
}

// Shutdown implements sdktrace.SpanExporter.
func (e *ConsoleExporter) Shutdown(ctx context.Context) error { return e.ForceFlush(ctx) }

// WriteTree writes spans as trees, one per trace and root, children in the
// order they started. A span whose parent is not among spans is a root.
func WriteTree(w io.Writer, spans []sdktrace.ReadOnlySpan) error {
	byID := make(map[trace.SpanID]bool, len(spans))
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = true
	}
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent(); p.IsValid() && byID[p.SpanID()] {
			children[p.SpanID()] = append(children[p.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(ss []sdktrace.ReadOnlySpan) {
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].StartTime().Before(ss[j].StartTime()) })
	}
	byStart(roots)
	var b strings.Builder
	for _, r := range roots {
		fmt.Fprintf(&b, "trace %s\n", r.SpanContext().TraceID())
		var walk func(s sdktrace.ReadOnlySpan, prefix string, last, top bool)
		walk = func(s sdktrace.ReadOnlySpan, prefix string, last, top bool) {
			branch, cont := "├─ ", "│  "
			if last {
				branch, cont = "└─ ", "   "
			}
			if top {
				branch, cont = "", ""
			}
			b.WriteString(prefix + branch + line(s) + "\n")
			if d := attrString(s, telemetry.Diagnosis); d != "" {
				b.WriteString(prefix + cont + "│ " + d + "\n")
			}
			kids := children[s.SpanContext().SpanID()]
			byStart(kids)
			for i, k := range kids {
				walk(k, prefix+cont, i == len(kids)-1, false)
			}
		}
		walk(r, "", true, true)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// line is one span's row: name, duration, and what retrace recorded.
func line(s sdktrace.ReadOnlySpan) string {
	// A span's name and status text may come from instrumentation other
	// than retrace's (a workflow engine's, an HTTP client's), which does
	// not redact: the tree, printed to a terminal or a log, passes them
	// through the redactor's patterns, as everything retrace writes.
	parts := []string{redact.Text(s.Name(), nil, 0), fmtDuration(s.EndTime().Sub(s.StartTime()))}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if v, ok := attrs[telemetry.Attempt]; ok {
		a := fmt.Sprintf("attempt=%d", v.AsInt64())
		if d, ok := attrs[telemetry.RetryDelayMs]; ok && d.AsInt64() > 0 {
			a += fmt.Sprintf(" after=%s", fmtDuration(time.Duration(d.AsInt64())*time.Millisecond))
		}
		parts = append(parts, a)
	}
	if v, ok := attrs[telemetry.Outcome]; ok {
		o := "outcome=" + v.AsString()
		if n, ok := attrs[telemetry.Attempts]; ok {
			o += fmt.Sprintf(" attempts=%d", n.AsInt64())
			if m, ok := instrument.MaxAttempts(attrs); ok {
				o += fmt.Sprintf("/%d", m)
			}
		}
		parts = append(parts, o)
	}
	for _, k := range []attribute.Key{telemetry.Calls, telemetry.CallsUncounted, telemetry.CallsWorstCase, telemetry.Uncounted, telemetry.CircuitState, telemetry.BudgetLeft} {
		if v, ok := attrs[k]; ok {
			name := strings.TrimPrefix(string(k), "retrace.")
			parts = append(parts, name+"="+v.String())
		}
	}
	if s.Status().Code == codes.Error {
		e := "✗"
		if v, ok := attrs[telemetry.ErrorClass]; ok {
			e += " " + v.AsString()
		}
		if v, ok := attrs[semconv.ErrorType]; ok {
			e += " " + v.AsString()
		}
		if _, isLayer := attrs[telemetry.Outcome]; !isLayer && s.Status().Description != "" {
			e += ": " + oneLine(redact.Text(s.Status().Description, nil, 0), 120)
		}
		parts = append(parts, e)
	}
	for _, ev := range s.Events() {
		if ev.Name == telemetry.EventNestedRetry {
			for _, kv := range ev.Attributes {
				if kv.Key == telemetry.NestedLayers {
					parts = append(parts, "⚠ nested retries "+kv.Value.AsString())
				}
			}
		}
	}
	return strings.Join(parts, "  ")
}

func attrString(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.AsString()
		}
	}
	return ""
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
