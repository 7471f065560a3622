package main

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/telemetry"
)

// The page's template, style and script, embedded so that the page needs
// nothing but itself: it is one file, read from disk, that fetches nothing.
//
//go:embed waterfall/page.html.tmpl waterfall/page.css waterfall/page.js
var waterfallFiles embed.FS

const (
	// maxHTMLText is the most bytes of one text (an attribute's value, a
	// status, a diagnosis) the page holds, the cut marked: a span's
	// attributes are the trace's to size, the page's size is ours.
	maxHTMLText = 2048
	// maxDrawnTraces is the most waterfalls one page draws; the traces
	// past it are listed in the index, each with its ID, for -trace.
	maxDrawnTraces = 100
	// maxGroupIDs is the most IDs the index lists of the traces drawn
	// once for a kind (see buildPage); the rest are counted.
	maxGroupIDs = 20
)

// clean is every text of the trace as the page holds it: redacted by
// retrace's one redaction rule (internal/redact, the rule policies.Redact
// applies), then cut to maxHTMLText. A trace is untrusted input, and a span
// written by a program that did not redact (or by an older retrace) may
// carry a key; the page is a file people pass around. html/template escapes
// what is left for where it is written.
func clean(s string) string { return redact.Text(s, nil, maxHTMLText) }

// explainHTML writes the traces of rs as one HTML page to path: the trace
// id alone when id is given, else every trace; from names the input for
// the errors.
func explainHTML(rs []*tracepb.ResourceSpans, id, from, path string, stdout io.Writer) error {
	var (
		order   []string
		byTrace map[string][]sdktrace.ReadOnlySpan
	)
	if id != "" {
		spans, err := pickTrace(rs, id, from)
		if err != nil {
			return err
		}
		order, byTrace = []string{id}, map[string][]sdktrace.ReadOnlySpan{id: spans}
	} else {
		var err error
		if order, byTrace, err = splitTraces(rs); err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		if len(order) == 0 {
			return fmt.Errorf("%s holds no spans", from)
		}
	}
	page := buildPage(order, byTrace, from)
	var b bytes.Buffer
	if err := writeHTML(&b, page); err != nil {
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return err
	}
	drawn := 0
	for _, e := range page.Index {
		if e.Drawn {
			drawn++
		}
	}
	_, err := fmt.Fprintf(stdout, "wrote %s: %s drawn of %s in %s, %d bytes\n", path, plural(drawn, "trace"), plural(len(order), "trace"), from, b.Len())
	return err
}

// htmlPage is what the page shows. Every text in it came through clean.
type htmlPage struct {
	From   string
	Traces []htmlTrace
	Index  []htmlEntry
	// Grouped: the input held more than maxListed traces, and traces
	// alike (see shape) are drawn once.
	Grouped bool
	Total   int // traces in the input
	CSS     template.CSS
	JS      template.JS
	// ScriptHash is the script's SHA-256, for the page's
	// Content-Security-Policy: the browser runs that script and no other,
	// and fetches nothing.
	ScriptHash string
}

// htmlEntry is one line of the index: a trace drawn, or listed only.
type htmlEntry struct {
	N     int // the trace's number on the page, from 1, when drawn
	Drawn bool
	ID    string
	About string
	More  int      // traces alike, not drawn
	IDs   []string // the first maxGroupIDs of them
}

// htmlTrace is one trace's waterfall and header.
type htmlTrace struct {
	N       int
	ID      string
	Err     string // the analysis failed: why (the rows are drawn all the same)
	A       *Analysis
	Chain   string   // a.chain()
	Advice  []string // a.Advice's texts
	Summary string   // explain's text for the analysis, as the terminal shows it
	Spans   int
	Wall    string // the trace's wall time
	Cfg     string // its time with every backoff as configured
	Ticks   []htmlTick
	Rows    []htmlRow
}

type htmlTick struct{ At, Wall, Cfg string }

// htmlPos is a bar's place on the lane, in percent of the trace's time:
// its left edge and width.
type htmlPos struct{ L, W string }

// htmlRow is one span.
type htmlRow struct {
	SpanID  string
	Name    string
	Depth   int    // indentation, at most maxDrawnDepth+1
	Kind    string // layer, attempt, policy, model, tool, request, span
	Look    string // one of outcomeLooks: the bar's colour
	Outcome string // the same in words: the page reads without colour
	Dur     string
	Note    string // why the span is drawn at the left margin, when not a root
	Wall    htmlPos
	Cfg     htmlPos
	Gap     *htmlGap
	Marks   []htmlMark
	Attrs   []htmlAttr
	Events  []htmlEvent
	Ghost   *htmlGhost
}

// htmlGap is the backoff waited before an attempt, drawn between the
// previous attempt's end and this one's start.
type htmlGap struct {
	Wall, Cfg htmlPos
	Label     string // "backoff 2s", "Retry-After 5s"
	Title     string
}

// htmlMark is a decision drawn at its time: a breaker, a bulkhead, a
// timeout, degraded state, a compaction, a fallback, the budget.
type htmlMark struct {
	Kind      string // one of markKinds
	Wall, Cfg string // left, in percent
	Label     string
}

// htmlGhost stands for the attempts a layer makes without a span each (an
// SDK's own retries declared to retrace): the trace knows their limit, not
// their number.
type htmlGhost struct {
	Layer string
	Limit int
}

type htmlAttr struct{ Key, Value string }

type htmlEvent struct {
	Name  string
	At    string // after the span's start
	Attrs []htmlAttr
}

// outcomeLooks are the colours a row can have: a closed set, since a class
// read from a trace is untrusted text and becomes a CSS class name.
var outcomeLooks = map[string]bool{
	"transient": true, "permanent": true, "fatal": true, "context_overflow": true,
	"programming": true, "canceled": true, "user_action": true,
}

// markKinds are the kinds of mark, each drawn in its own shape and colour.
const (
	markBreaker   = "breaker"
	markBulkhead  = "bulkhead"
	markTimeout   = "timeout"
	markDegraded  = "degraded"
	markCompacted = "compacted"
	markFallback  = "fallback"
	markBudget    = "budget"
	markNested    = "nested"
)

// buildPage reads each trace into a waterfall. With more than maxListed
// traces, traces alike (see shape) are drawn once and the index counts the
// rest: a demo's fleet makes thousands of one-call traces, and one of each
// shape says what they all say.
func buildPage(order []string, byTrace map[string][]sdktrace.ReadOnlySpan, from string) *htmlPage {
	p := &htmlPage{From: clean(from), Total: len(order), Grouped: len(order) > maxListed}
	byKind := map[string]int{}
	for _, tid := range order {
		about, root := describeRoot(byTrace[tid])
		if p.Grouped {
			kind := root + "\n" + shape(newForest(byTrace[tid]))
			if i, ok := byKind[kind]; ok {
				e := &p.Index[i]
				e.More++
				if len(e.IDs) < maxGroupIDs {
					e.IDs = append(e.IDs, tid)
				}
				continue
			}
			byKind[kind] = len(p.Index)
		}
		p.Index = append(p.Index, htmlEntry{ID: tid, About: clean(about)})
	}
	for i := range p.Index {
		e := &p.Index[i]
		if len(p.Traces) == maxDrawnTraces {
			break
		}
		e.N, e.Drawn = len(p.Traces)+1, true
		p.Traces = append(p.Traces, buildTrace(e.N, byTrace[e.ID]))
	}
	return p
}

// shape is what two traces drawn alike share besides their root's kind
// (describeRoot: its calls and worst case among them): for every span, in
// the order the waterfall draws them, its depth, name, status, error type,
// outcome, attempt, backoff, breaker state and events. Times and IDs differ
// between any two traces; these are what a reader compares.
func shape(f *forest) string {
	var b strings.Builder
	for _, n := range preorder(f) {
		fmt.Fprintf(&b, "%d|%s|%d|%s|%s|%d|%d|%s", n.depth, n.s.Name(), n.s.Status().Code, n.str(semconv.ErrorType),
			n.str(telemetry.Outcome), n.num(telemetry.Attempt), n.num(telemetry.RetryDelayMs), n.str(telemetry.CircuitState))
		for _, ev := range n.s.Events() {
			b.WriteString("|" + ev.Name)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// buildTrace draws one trace: its rows in the order the text tree draws
// them, its header from explain's analysis.
func buildTrace(n int, spans []sdktrace.ReadOnlySpan) htmlTrace {
	f := newForest(spans)
	t := htmlTrace{N: n, ID: f.traceID.String(), Spans: len(f.all)}
	tl := newTimeline(f)
	d := &drawing{tl: tl, hidden: map[string]int{}, opened: breakerOpenings(f.all), prev: tl.prev, movedOn: movedOn(f.all)}
	a, err := analyze(f)
	if err != nil {
		t.Err = clean(err.Error())
	} else {
		// The hidden layers by the names the spans carry, before the
		// analysis's texts are cleaned for the page.
		for _, l := range a.Nested {
			if l.Hidden && l.MaxAttempts > 1 {
				d.hidden[l.Layer] = l.MaxAttempts
			}
		}
		t.A = a
		cleanAnalysis(a)
		t.Chain = a.chain()
		for _, ad := range a.Advice {
			t.Advice = append(t.Advice, ad.Text)
		}
		var b strings.Builder
		_ = a.write(&b) // a strings.Builder does not fail; its texts are clean already
		t.Summary = b.String()
	}
	t.Wall, t.Cfg = short(tl.wallTotal), short(tl.cfgTotal)
	for _, q := range []float64{0, 0.25, 0.5, 0.75, 1} {
		t.Ticks = append(t.Ticks, htmlTick{
			At:   pct(q),
			Wall: short(time.Duration(q * float64(tl.wallTotal))),
			Cfg:  short(time.Duration(q * float64(tl.cfgTotal))),
		})
	}
	for _, nd := range preorder(f) {
		t.Rows = append(t.Rows, d.row(nd))
	}
	return t
}

// drawing is what a trace's rows are drawn with, each worked out once for
// the whole trace, so that drawing a row reads and never searches: the
// rows are linear in the spans, however many siblings a span has.
type drawing struct {
	tl      *timeline
	hidden  map[string]int  // the layers whose attempts have no span, by their limit
	opened  map[*node]bool  // breaker spans at which a breaker opened (breakerOpenings)
	prev    map[*node]*node // each attempt's previous attempt (attemptsBefore)
	movedOn map[*node]bool  // failed fallback candidates after which another was tried (movedOn)
}

// attemptsBefore maps each attempt span to the attempt before it under the
// same layer: the latest attempt sibling that started before it (children
// are by start time).
func attemptsBefore(all []*node) map[*node]*node {
	prev := map[*node]*node{}
	for _, n := range all {
		var last *node
		for _, k := range n.kids {
			if !k.isAttempt() {
				continue
			}
			if last != nil {
				prev[k] = last
			}
			last = k
		}
	}
	return prev
}

// movedOn finds the fallback candidates that failed and were followed by
// another candidate of the same chain: where the fallback moved on.
func movedOn(all []*node) map[*node]bool {
	out := map[*node]bool{}
	for _, n := range all {
		var failed *node
		for _, k := range n.kids {
			if k.str(telemetry.Layer) != telemetry.LayerCandidate {
				continue
			}
			if failed != nil {
				out[failed] = true
			}
			failed = nil
			if k.failed() {
				failed = k
			}
		}
	}
	return out
}

// cleanAnalysis redacts the texts of the analysis that the page shows.
// Its counts are the page's header as they are: numbers hold no secret.
func cleanAnalysis(a *Analysis) {
	a.Root, a.Outcome, a.Diagnosis = clean(a.Root), clean(a.Outcome), clean(a.Diagnosis)
	for i := range a.Nested {
		a.Nested[i].Layer = clean(a.Nested[i].Layer)
	}
	for i := range a.Advice {
		a.Advice[i].Text = clean(a.Advice[i].Text)
	}
	for i := range a.Decisions {
		d := &a.Decisions[i]
		d.Span, d.Outcome, d.Diagnosis = clean(d.Span), clean(d.Outcome), clean(d.Diagnosis)
	}
	for i := range a.Errors {
		a.Errors[i].Class, a.Errors[i].Type = clean(a.Errors[i].Class), clean(a.Errors[i].Type)
	}
	for i := range a.Refused {
		r := &a.Refused[i]
		r.Policy, r.Layer, r.Tool, r.Type = clean(r.Policy), clean(r.Layer), clean(r.Tool), clean(r.Type)
	}
	for i := range a.Breakers {
		b := &a.Breakers[i]
		b.Name, b.Layer, b.Tool = clean(b.Name), clean(b.Layer), clean(b.Tool)
	}
}

// preorder lists the forest's spans as the text tree draws them: each top
// in turn, depth first, children in the order they started; without
// recursion, so a deep chain ends as a short one does.
func preorder(f *forest) []*node {
	out := make([]*node, 0, len(f.all))
	for _, top := range f.tops {
		stack := []*node{top}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			out = append(out, n)
			for i := len(n.kids) - 1; i >= 0; i-- {
				stack = append(stack, n.kids[i])
			}
		}
	}
	return out
}

// breakerOpenings finds the breaker spans at which a breaker opened: the
// first span of a guard (the layer and tool it guards) that found it open
// after one that did not. A breaker already open at the trace's first
// call opened before the trace, and is drawn refusing only.
func breakerOpenings(all []*node) map[*node]bool {
	type guard struct{ layer, tool string }
	last := map[guard]string{}
	opened := map[*node]bool{}
	for _, n := range all { // by start time
		if n.str(telemetry.Policy) != telemetry.PolicyCircuitBreaker {
			continue
		}
		// What it guards, read as the analysis reads it (breakers).
		g := guard{layer: n.str(telemetry.Layer)}
		if n.layer != nil {
			g.layer = cmp.Or(g.layer, n.layer.str(telemetry.Layer))
			g.tool = n.layer.str(semconv.GenAIToolName)
		}
		state := n.str(telemetry.CircuitState)
		if prev, seen := last[g]; seen && prev != telemetry.CircuitOpen && state == telemetry.CircuitOpen {
			opened[n] = true
		}
		last[g] = state
	}
	return opened
}

// row draws span n: its bar in both times, its outcome in colour and in
// words, the backoff before it, its marks, its attributes and events
// (cleaned), and a ghost row after it when its layer's attempts have no
// span each.
func (d *drawing) row(n *node) htmlRow {
	s, tl := n.s, d.tl
	r := htmlRow{
		SpanID: s.SpanContext().SpanID().String(),
		Name:   clean(s.Name()),
		Depth:  min(n.depth, maxDrawnDepth+1),
		Kind:   rowKind(n),
		Dur:    short(s.EndTime().Sub(s.StartTime())),
		Wall:   tl.wallPos(s.StartTime(), s.EndTime()),
		Cfg:    tl.cfgPos(s.StartTime(), s.EndTime()),
	}
	switch n.top {
	case topOrphan:
		r.Note = "parent " + s.Parent().SpanID().String() + " not in the trace"
	case topCycle:
		r.Note = cycleNote(n)
	}
	r.Look, r.Outcome = outcome(n)
	if n.isAttempt() && n.num(telemetry.RetryDelayMs) > 0 {
		r.Gap = backoffGap(n, d.prev[n], tl)
	}
	r.Marks = d.marks(n)
	for _, kv := range s.Attributes() {
		r.Attrs = append(r.Attrs, htmlAttr{Key: clean(string(kv.Key)), Value: clean(kv.Value.String())})
	}
	r.Attrs = append(r.Attrs,
		htmlAttr{Key: "span", Value: r.SpanID + " (" + s.SpanKind().String() + ")"},
		htmlAttr{Key: "status", Value: clean(strings.TrimSpace(s.Status().Code.String() + " " + s.Status().Description))},
		htmlAttr{Key: "start", Value: "+" + short(s.StartTime().Sub(tl.t0))},
	)
	if p := s.Parent(); p.IsValid() {
		r.Attrs = append(r.Attrs, htmlAttr{Key: "parent", Value: p.SpanID().String()})
	}
	for _, ev := range s.Events() {
		e := htmlEvent{Name: clean(ev.Name), At: "+" + short(ev.Time.Sub(s.StartTime()))}
		for _, kv := range ev.Attributes {
			e.Attrs = append(e.Attrs, htmlAttr{Key: clean(string(kv.Key)), Value: clean(kv.Value.String())})
		}
		r.Events = append(r.Events, e)
	}
	if limit, ok := d.hidden[n.str(telemetry.Layer)]; ok && n.isLayer() {
		r.Ghost = &htmlGhost{Layer: clean(n.str(telemetry.Layer)), Limit: limit}
	}
	return r
}

// rowKind says what a span is, by the attributes retrace writes: a layer,
// an attempt, a policy, else a model call, a tool call or a request by the
// GenAI and HTTP conventions.
func rowKind(n *node) string {
	switch {
	case n.isPolicy():
		return "policy"
	case n.isAttempt():
		return "attempt"
	case n.has(semconv.GenAIToolName):
		return "tool"
	case n.str(semconv.GenAIOperation) == "chat", n.str(telemetry.Layer) == "model":
		return "model"
	case n.has(semconv.HTTPMethod), n.s.SpanKind() == trace.SpanKindClient:
		return "request"
	case n.isLayer():
		return "layer"
	}
	return "span"
}

// outcome is a row's colour (one of outcomeLooks, or ok, refused, error)
// and the same in words.
func outcome(n *node) (look, text string) {
	var words []string
	if o := n.str(telemetry.Outcome); o != "" {
		o = clean(o)
		if c, ok := n.attrs[telemetry.Attempts]; ok {
			o += " (" + plural(c.AsInt64(), "attempt") + ")"
		}
		words = append(words, o)
	}
	if a := n.num(telemetry.Attempt); a > 0 {
		w := fmt.Sprintf("attempt %d", a)
		if d := n.num(telemetry.RetryDelayMs); d > 0 {
			w += " after " + short(time.Duration(d)*time.Millisecond)
		}
		words = append(words, w)
	}
	class, typ := n.str(telemetry.ErrorClass), n.str(semconv.ErrorType)
	switch {
	case n.refused():
		look = "refused"
		words = append(words, "⊘ refused: "+clean(typ))
	case n.failed():
		look = "error"
		if outcomeLooks[class] {
			look = class
		}
		words = append(words, clean(strings.TrimSpace("✗ "+cmp.Or(class, "error")+" "+typ)))
	default:
		// retrace sets status Error on every span that failed and leaves
		// the others unset: a span that did not fail succeeded.
		look = "ok"
		words = append(words, "✓ ok")
	}
	return look, strings.Join(words, " · ")
}

// backoffGap draws the wait before attempt n: from the end of the attempt
// before it, prev, to n's start. The label says what set the wait: the
// server's Retry-After when the failure before asked for exactly that
// long, else the backoff.
func backoffGap(n, prev *node, tl *timeline) *htmlGap {
	if prev == nil {
		return nil
	}
	delay := time.Duration(n.num(telemetry.RetryDelayMs)) * time.Millisecond
	from, to := prev.s.EndTime(), n.s.StartTime()
	if to.Before(from) {
		from = to
	}
	g := &htmlGap{Wall: tl.wallPos(from, to), Cfg: tl.cfgPos(from, to)}
	after := time.Duration(prev.num(telemetry.RetryAfterMs)) * time.Millisecond
	if after > 0 && after == delay {
		g.Label = "Retry-After " + short(delay)
		g.Title = fmt.Sprintf("waited %s, as the server's Retry-After asked; wall time %s", short(delay), short(to.Sub(from)))
	} else {
		g.Label = "backoff " + short(delay)
		g.Title = fmt.Sprintf("waited %s, the configured backoff; wall time %s", short(delay), short(to.Sub(from)))
		if after > 0 {
			g.Title += fmt.Sprintf("; the server asked for %s (Retry-After)", short(after))
		}
	}
	return g
}

// marks are the decisions drawn on n's row, each at its time: where a
// breaker opened, refused or let a probe through half open, a bulkhead was
// full, a timeout fired, the budget refused, a fallback moved on, shared
// state degraded, history was compacted, nested retries were announced.
// Each rule reads an attribute or an event that package telemetry names.
func (d *drawing) marks(n *node) []htmlMark {
	tl := d.tl
	var out []htmlMark
	at := func(kind string, t time.Time, label string) {
		out = append(out, htmlMark{Kind: kind, Wall: tl.wallAt(t), Cfg: tl.cfgAt(t, false), Label: label})
	}
	start, end := n.s.StartTime(), n.s.EndTime()
	policy := n.str(telemetry.Policy)
	switch {
	case policy == telemetry.PolicyCircuitBreaker && n.str(telemetry.CircuitState) == telemetry.CircuitOpen:
		label := "breaker open: refused the call"
		if d.opened[n] {
			label = "breaker opened: refused the call"
		}
		if ms := n.num(telemetry.RetryAfterMs); ms > 0 {
			label += ", open " + short(time.Duration(ms)*time.Millisecond) + " more"
		}
		at(markBreaker, start, label)
	case policy == telemetry.PolicyCircuitBreaker && n.str(telemetry.CircuitState) == telemetry.CircuitHalfOpen:
		at(markBreaker, start, "breaker half-open: let a probe through")
	case policy == telemetry.PolicyBulkhead && n.str(semconv.ErrorType) == "bulkhead_full":
		at(markBulkhead, start, "bulkhead full: refused the call")
	case policy == telemetry.PolicyTimeout && n.failed():
		at(markTimeout, end, "timeout fired")
	}
	if n.isLayer() && n.str(telemetry.Outcome) == string(telemetry.OutcomeBudgetExhausted) {
		at(markBudget, end, "task budget refused a retry")
	}
	if d.movedOn[n] {
		at(markFallback, end, "fallback moved on: "+clean(n.str(semconv.ErrorType))+", the next candidate is tried")
	}
	compacted := false
	for _, ev := range n.s.Events() {
		switch ev.Name {
		case telemetry.EventStateDegraded:
			at(markDegraded, ev.Time, "state degraded: decided on local state ("+clean(eventAttr(ev, telemetry.Policy))+", "+clean(eventAttr(ev, telemetry.StateError))+")")
		case telemetry.EventCompacted:
			compacted = true
			at(markCompacted, ev.Time, "history compacted: "+eventAttr(ev, telemetry.CompactionBefore)+" → "+eventAttr(ev, telemetry.CompactionAfter)+" messages")
		case telemetry.EventNestedRetry:
			at(markNested, ev.Time, "nested retries: "+clean(eventAttr(ev, telemetry.NestedLayers))+" = "+eventAttr(ev, telemetry.CallsWorstCase)+" calls at worst")
		}
	}
	if v, ok := n.attrs[telemetry.ConversationCompacted]; ok && v.AsBool() && !compacted {
		at(markCompacted, start, "history compacted")
	}
	return out
}

func eventAttr(ev sdktrace.Event, k attribute.Key) string {
	for _, kv := range ev.Attributes {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

// timeline places a trace's times on the lane twice: in wall time, and
// with every backoff as configured (retrace.retry.delay_ms), since a
// program may run its backoffs on a faster clock than the one it
// configures (the demo's -time-scale). The configured time stretches each
// backoff gap to its delay and leaves the calls as they ran. Gaps that
// overlap one kept before (retries in concurrent branches) are left in
// wall time: one time axis cannot stretch the same instant twice.
type timeline struct {
	prev                map[*node]*node // each attempt's previous attempt (attemptsBefore)
	t0                  time.Time
	gaps                []tlGap         // by start, none overlapping
	extra               []time.Duration // extra[i]: what gaps[:i] add, fully stretched
	wallTotal, cfgTotal time.Duration
}

type tlGap struct {
	a, b  time.Time
	delay time.Duration
}

func newTimeline(f *forest) *timeline {
	tl := &timeline{prev: attemptsBefore(f.all)}
	var t1 time.Time
	for i, n := range f.all {
		if i == 0 || n.s.StartTime().Before(tl.t0) {
			tl.t0 = n.s.StartTime()
		}
		if i == 0 || n.s.EndTime().After(t1) {
			t1 = n.s.EndTime()
		}
	}
	var gaps []tlGap
	for _, n := range f.all {
		if !n.isAttempt() || n.num(telemetry.RetryDelayMs) <= 0 {
			continue
		}
		if prev := tl.prev[n]; prev != nil && !n.s.StartTime().Before(prev.s.EndTime()) {
			gaps = append(gaps, tlGap{a: prev.s.EndTime(), b: n.s.StartTime(), delay: time.Duration(n.num(telemetry.RetryDelayMs)) * time.Millisecond})
		}
	}
	sort.SliceStable(gaps, func(i, j int) bool { return gaps[i].a.Before(gaps[j].a) })
	tl.extra = []time.Duration{0}
	for _, g := range gaps {
		if k := len(tl.gaps); k > 0 && g.a.Before(tl.gaps[k-1].b) {
			continue
		}
		tl.gaps = append(tl.gaps, g)
		tl.extra = append(tl.extra, tl.extra[len(tl.extra)-1]+g.delay-g.b.Sub(g.a))
	}
	tl.wallTotal = max(t1.Sub(tl.t0), 0)
	tl.cfgTotal = tl.cfg(t1, true)
	return tl
}

// cfg is t's offset from the trace's start in configured time. A time in a
// gap moves through it in proportion; end tells a span's end from its
// start, for a gap of no wall time: a span ending where it starts ends
// before the wait, one starting there starts after it.
func (tl *timeline) cfg(t time.Time, end bool) time.Duration {
	i := sort.Search(len(tl.gaps), func(i int) bool {
		if end {
			return !tl.gaps[i].a.Before(t)
		}
		return tl.gaps[i].a.After(t)
	})
	add := tl.extra[i]
	if i > 0 {
		if g := tl.gaps[i-1]; t.Before(g.b) {
			w, in := g.b.Sub(g.a), t.Sub(g.a)
			add -= g.delay - w
			add += time.Duration(float64(in)*float64(g.delay)/float64(w)) - in
		}
	}
	return max(t.Sub(tl.t0)+add, 0)
}

func (tl *timeline) wallAt(t time.Time) string { return pct(ratio(t.Sub(tl.t0), tl.wallTotal)) }

func (tl *timeline) cfgAt(t time.Time, end bool) string {
	return pct(ratio(tl.cfg(t, end), tl.cfgTotal))
}

func (tl *timeline) wallPos(from, to time.Time) htmlPos {
	l, r := ratio(from.Sub(tl.t0), tl.wallTotal), ratio(to.Sub(tl.t0), tl.wallTotal)
	return htmlPos{L: pct(l), W: pct(max(r-l, 0))}
}

func (tl *timeline) cfgPos(from, to time.Time) htmlPos {
	l, r := ratio(tl.cfg(from, false), tl.cfgTotal), ratio(tl.cfg(to, true), tl.cfgTotal)
	return htmlPos{L: pct(l), W: pct(max(r-l, 0))}
}

// ratio is d's share of total, within [0, 1].
func ratio(d, total time.Duration) float64 {
	if total <= 0 {
		return 0
	}
	return min(max(float64(d)/float64(total), 0), 1)
}

// pct writes a share as a CSS percentage's number.
func pct(r float64) string { return strconv.FormatFloat(r*100, 'f', 2, 64) }

// short writes a duration to about three digits.
func short(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// writeHTML renders the page. The template is parsed here rather than at
// start-up: a broken template is an error of this command, not a panic of
// every other.
func writeHTML(w io.Writer, p *htmlPage) error {
	css, err := waterfallFiles.ReadFile("waterfall/page.css")
	if err != nil {
		return err
	}
	js, err := waterfallFiles.ReadFile("waterfall/page.js")
	if err != nil {
		return err
	}
	sum := sha256.Sum256(js)
	p.CSS, p.JS, p.ScriptHash = template.CSS(css), template.JS(js), "sha256-"+base64.StdEncoding.EncodeToString(sum[:])
	t, err := template.New("page.html.tmpl").Funcs(template.FuncMap{"add": func(a, b int) int { return a + b }}).
		ParseFS(waterfallFiles, "waterfall/page.html.tmpl")
	if err != nil {
		return err
	}
	return t.Execute(w, p)
}
