package main

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/instrument"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// node is a span with its attributes by key, its place in the forest, and
// what the analysis asks of its ancestors, worked out once, top down.
type node struct {
	s     sdktrace.ReadOnlySpan
	attrs map[attribute.Key]attribute.Value
	kids  []*node // by start time
	up    *node   // nil for a top
	top   topKind
	index int // in forest.all
	mark  walkMark
	depth int // below its top
	cycle int // for a cut cycle's top, the spans in the cycle

	layer       *node // the nearest layer span above
	retrying    *node // the nearest layer span above that allows more than one attempt
	lastAttempt int64 // the highest retrace.attempt among the attempt spans beneath
}

// topKind says why a span is drawn at the left margin.
type topKind uint8

const (
	notTop    topKind = iota
	topRoot           // it has no parent
	topOrphan         // its parent is not in the trace
	topCycle          // its parent link closes a cycle, and it is the cycle's earliest span
)

type walkMark uint8

const (
	unwalked walkMark = iota
	onPath
	walked
)

func (n *node) str(k attribute.Key) string { return n.attrs[k].AsString() }
func (n *node) num(k attribute.Key) int64  { return n.attrs[k].AsInt64() }
func (n *node) has(k attribute.Key) bool   { _, ok := n.attrs[k]; return ok }
func (n *node) failed() bool               { return n.s.Status().Code == codes.Error }

// retries reports whether n is a layer span that allows more than one
// attempt, by the limit it states (instrument.MaxAttempts).
func (n *node) retries() bool {
	m, ok := instrument.MaxAttempts(n.attrs)
	return ok && m > 1
}

// isLayer: a layer span. isAttempt: an attempt span. isPolicy: a policy span.
func (n *node) isLayer() bool {
	return n.has(telemetry.Layer) && !n.has(telemetry.Attempt) && !n.has(telemetry.Policy)
}
func (n *node) isAttempt() bool { return n.has(telemetry.Attempt) }
func (n *node) isPolicy() bool  { return n.has(telemetry.Policy) }

// retrace reports whether n is a layer or attempt span.
func (n *node) retrace() bool { return n.isLayer() || n.isAttempt() }

// forest is one trace's spans as trees, whatever their parent links say:
// each span kept has at most one parent, and the parents of any span lead
// to a top in fewer steps than there are spans. Every walk of it (the
// analysis, the drawing) is therefore linear in the spans and ends.
//
// How each shape of parent link is read:
//   - no parent: a root, a top;
//   - a parent not in the trace: an orphan, a top of its own, drawn under
//     a heading of its own (a trace read before all its spans arrived);
//   - a span ID that an earlier span (in the input's order) has: left out,
//     and counted, since no parent link can tell the two apart;
//   - a cycle of parent links (a span its own parent, two spans each the
//     other's): cut at the cycle's earliest span, which becomes a top;
//     a trace whose spans all lie in or beneath cycles has no root, which
//     explain reports as an error.
type forest struct {
	traceID    trace.TraceID
	all        []*node // the spans kept, by start time
	tops       []*node // roots, then orphans, then cut cycles, each by start time
	duplicates int     // spans left out: their span ID was an earlier span's
	cycles     int     // parent cycles cut
	inCycles   int     // spans in those cycles (not those beneath them)
	deepest    int     // the greatest depth below a top
}

// newForest reads the spans of one trace into a forest, in time linear in
// the spans (and a sort).
func newForest(spans []sdktrace.ReadOnlySpan) *forest {
	f := &forest{}
	byID := make(map[trace.SpanID]*node, len(spans))
	for _, s := range spans {
		n := &node{s: s, attrs: make(map[attribute.Key]attribute.Value, len(s.Attributes()))}
		for _, kv := range s.Attributes() {
			n.attrs[kv.Key] = kv.Value
		}
		if id := s.SpanContext().SpanID(); id.IsValid() {
			if _, taken := byID[id]; taken {
				f.duplicates++
				continue
			}
			byID[id] = n
		}
		f.all = append(f.all, n)
	}
	if len(f.all) > 0 {
		f.traceID = f.all[0].s.SpanContext().TraceID()
	}
	sort.SliceStable(f.all, func(i, j int) bool { return f.all[i].s.StartTime().Before(f.all[j].s.StartTime()) })
	for i, n := range f.all {
		n.index = i
		p := n.s.Parent()
		switch up, ok := byID[p.SpanID()]; {
		case !p.IsValid():
			n.top = topRoot
		case !ok:
			n.top = topOrphan
		default:
			n.up = up
		}
	}
	f.cutCycles()
	for _, n := range f.all {
		if n.up != nil {
			n.up.kids = append(n.up.kids, n)
		} else {
			f.tops = append(f.tops, n)
		}
	}
	sort.SliceStable(f.tops, func(i, j int) bool { return f.tops[i].top < f.tops[j].top })
	f.descend()
	return f
}

// cutCycles cuts every cycle of parent links. Following parents from a span
// either reaches a top, or a span an earlier walk passed (which leads to a
// top, once its own cycle was cut), or a span of its own walk: a cycle,
// which it cuts at the cycle's earliest span. Each span is walked once.
func (f *forest) cutCycles() {
	var path []*node
	for _, n := range f.all {
		path = path[:0]
		u := n
		for u != nil && u.mark == unwalked {
			u.mark = onPath
			path = append(path, u)
			u = u.up
		}
		if u != nil && u.mark == onPath {
			i := len(path) - 1
			for path[i] != u {
				i--
			}
			cut := u
			for _, c := range path[i:] {
				if c.index < cut.index {
					cut = c
				}
			}
			cut.up, cut.top, cut.cycle = nil, topCycle, len(path)-i
			f.cycles++
			f.inCycles += len(path) - i
		}
		for _, p := range path {
			p.mark = walked
		}
	}
}

// descend works out each span's depth and the layers above it, top down,
// breadth first: a parent is always done before its children.
func (f *forest) descend() {
	queue := append(make([]*node, 0, len(f.all)), f.tops...)
	for i := 0; i < len(queue); i++ {
		n := queue[i]
		f.deepest = max(f.deepest, n.depth)
		for _, k := range n.kids {
			k.depth = n.depth + 1
			k.layer, k.retrying = n.layer, n.retrying
			if n.isLayer() {
				k.layer = n
				if n.retries() {
					k.retrying = n
				}
			}
			if k.isAttempt() {
				n.lastAttempt = max(n.lastAttempt, k.num(telemetry.Attempt))
			}
			queue = append(queue, k)
		}
	}
}

// root is the span the analysis starts from: the first root (by start
// time) that carries retrace.calls, else the first root; a trace without
// roots is read from its first orphan the same way. nil when the trace has
// neither, all its spans in or beneath parent cycles.
func (f *forest) root() *node {
	for _, kind := range []topKind{topRoot, topOrphan} {
		var first *node
		for _, t := range f.tops {
			if t.top != kind {
				continue
			}
			if t.has(telemetry.Calls) {
				return t
			}
			if first == nil {
				first = t
			}
		}
		if first != nil {
			return first
		}
	}
	return nil
}

// maxDrawnDepth is the deepest level the tree indents: every span deeper
// is drawn one level further in, marked with its depth. Every row is then
// at most this indentation and its span's own text long, so the tree grows
// with the spans, not with the square of its depth; retrace's own traces
// (an agent's loop, a session's fallbacks, an SDK's requests) are about a
// dozen levels deep, sub-agents a few more.
const maxDrawnDepth = 32

// write draws the forest: "trace ID", the roots' trees, then the orphans'
// and the cut cycles' under headings of their own, then a note on the
// spans drawn flat beyond maxDrawnDepth.
func (f *forest) write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "trace %s\n", f.traceID)
	kind := topRoot
	for _, t := range f.tops {
		if t.top != kind {
			kind = t.top
			switch kind {
			case topOrphan:
				fmt.Fprintf(bw, "\norphans: %s whose parent is not in the trace, each with the spans beneath it\n", plural(f.count(topOrphan), "span"))
			case topCycle:
				fmt.Fprintf(bw, "\nparent cycles: %s of %s, each drawn from its earliest span, whose parent link is ignored\n", plural(f.cycles, "cycle"), plural(f.inCycles, "span"))
			}
		}
		draw(bw, t)
	}
	if deep := f.deeperThan(maxDrawnDepth); deep > 0 {
		fmt.Fprintf(bw, "\nnote: %d spans lie deeper than %d levels, the deepest %d levels down: they are drawn at level %d, each marked [depth N]\n",
			deep, maxDrawnDepth, f.deepest, maxDrawnDepth+1)
	}
	return bw.Flush()
}

func (f *forest) count(kind topKind) int {
	n := 0
	for _, t := range f.tops {
		if t.top == kind {
			n++
		}
	}
	return n
}

func (f *forest) deeperThan(depth int) int {
	n := 0
	for _, s := range f.all {
		if s.depth > depth {
			n++
		}
	}
	return n
}

// draw writes the tree beneath top, depth first without recursion (a chain
// of a hundred thousand spans is as easy as a short one), children in the
// order they started.
func draw(bw *bufio.Writer, top *node) {
	type item struct {
		n    *node
		last bool
	}
	// last[d] tells whether the span drawn last at depth d was its
	// parent's last child: whether the line beneath it continues.
	var last [maxDrawnDepth + 1]bool
	stack := []item{{top, true}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		d := it.n.depth
		if d <= maxDrawnDepth {
			last[d] = it.last
		}
		var indent strings.Builder
		for l := 1; l < min(d, maxDrawnDepth+1); l++ {
			if last[l] {
				indent.WriteString("   ")
			} else {
				indent.WriteString("│  ")
			}
		}
		branch, cont := "", ""
		switch {
		case d > maxDrawnDepth:
			branch, cont = fmt.Sprintf("┆ [depth %d] ", d), "┆ "
		case d > 0 && it.last:
			branch, cont = "└─ ", "   "
		case d > 0:
			branch, cont = "├─ ", "│  "
		}
		line, diag := row(it.n.s)
		bw.WriteString(indent.String() + branch + line + topNote(it.n) + "\n")
		if diag != "" {
			bw.WriteString(indent.String() + cont + diag + "\n")
		}
		for i := len(it.n.kids) - 1; i >= 0; i-- {
			stack = append(stack, item{it.n.kids[i], i == len(it.n.kids)-1})
		}
	}
}

// topNote says why a span is drawn at the left margin, when it is not a
// root.
func topNote(n *node) string {
	switch n.top {
	case topOrphan:
		return fmt.Sprintf("  ⚠ parent %s not in the trace", n.s.Parent().SpanID())
	case topCycle:
		return "  ⚠ " + cycleNote(n)
	}
	return ""
}

// cycleNote says how a cut cycle's top closed its cycle.
func cycleNote(n *node) string {
	if n.cycle == 1 {
		return "its own parent"
	}
	return fmt.Sprintf("its parent %s closes a cycle of %d spans", n.s.Parent().SpanID(), n.cycle)
}

// row is a span's line and its diagnosis line ("" without one), as the
// console exporter draws them (setup.WriteTree of the span alone, as a
// root, without its "trace ID" heading): explain and the demo show a span
// alike, and only the layout is explain's own. The line holds one row
// because every text was made printable as it was read.
func row(s sdktrace.ReadOnlySpan) (line, diag string) {
	var b strings.Builder
	_ = setup.WriteTree(&b, []sdktrace.ReadOnlySpan{rootless{s}}) // a strings.Builder does not fail
	_, text, _ := strings.Cut(b.String(), "\n")
	line, diag, _ = strings.Cut(strings.TrimSuffix(text, "\n"), "\n")
	return line, diag
}

// rootless is a span without its parent. setup.WriteTree draws as a root
// only a span whose parent is not among the spans it is given, which a span
// that is its own parent never is: without its parent, every span is one.
type rootless struct{ sdktrace.ReadOnlySpan }

func (rootless) Parent() trace.SpanContext { return trace.SpanContext{} }
