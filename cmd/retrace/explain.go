package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// explain prints one trace's tree and what to change: the amplification,
// the nested retrying layers, the time spent waiting against calling, the
// breaker and budget decisions, the errors by class, and advice read off
// the attributes retrace writes.
//
// A trace is untrusted input, and every shape of it ends: the input is read
// up to -max-bytes (64MiB) and refused past it, Jaeger is given -timeout
// (30s) to answer, each text is made printable, broken parent links are
// read as the forest type says (orphans, duplicates, cut cycles: an output
// that says what it did), a trace with no root at all is an error, and the
// tree indents at most maxDrawnDepth levels.
func explain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jaeger := fs.String("jaeger", "", "read the trace from Jaeger's query API at `URL` (http://localhost:16686)")
	id := fs.String("trace", "", "the trace `ID` (32 hex digits); with -otlp-file, needed when the file holds several")
	file := fs.String("otlp-file", "", "read the trace from `FILE`, OTLP JSON (the demo's -otlp-file, the Collector's file exporter)")
	asJSON := fs.Bool("json", false, "print the analysis as one JSON object, without the tree")
	htmlOut := fs.String("html", "", "write the traces to `FILE` as one offline HTML page, a waterfall each (with -otlp-file and no -trace: every trace in the file)")
	timeout := fs.Duration("timeout", 30*time.Second, "with -jaeger, the time `D` Jaeger has to send the whole trace, such as 30s or 2m")
	maxBytes := byteSize(defaultMaxBytes)
	fs.Var(&maxBytes, "max-bytes", "read at most `SIZE` of OTLP JSON (the file, or Jaeger's answer), such as 64MiB or 1GiB; more is refused, never cut")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: retrace explain (-jaeger URL -trace ID [-timeout D] | -otlp-file FILE [-trace ID]) [-max-bytes SIZE] [-json | -html FILE]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("explain: unexpected argument %q", fs.Arg(0))
	}
	if *id != "" {
		if _, err := trace.TraceIDFromHex(strings.ToLower(*id)); err != nil {
			return fmt.Errorf("explain: -trace %q: want 32 hex digits", *id)
		}
	}
	if *asJSON && *htmlOut != "" {
		return errors.New("explain: give -json or -html, not both")
	}
	if *timeout <= 0 {
		return fmt.Errorf("explain: -timeout %s: want a duration above 0, such as 30s or 2m", *timeout)
	}
	var (
		rs   []*tracepb.ResourceSpans
		from string
		err  error
	)
	switch {
	case *jaeger != "" && *file != "":
		return errors.New("explain: give -jaeger or -otlp-file, not both")
	case *jaeger != "":
		if *id == "" {
			return errors.New("explain: -jaeger needs -trace ID")
		}
		rs, err = fetchJaeger(ctx, jaegerQuery{base: *jaeger, id: strings.ToLower(*id), timeout: *timeout, maxBytes: maxBytes})
		from = "jaeger's answer"
	case *file != "":
		rs, err = readFile(*file, maxBytes)
		from = *file
	default:
		fs.Usage()
		return errors.New("explain: give -jaeger URL -trace ID, or -otlp-file FILE")
	}
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	if *htmlOut != "" {
		if err := explainHTML(rs, strings.ToLower(*id), from, *htmlOut, stdout); err != nil {
			return fmt.Errorf("explain: %w", err)
		}
		return nil
	}
	spans, err := pickTrace(rs, *id, from)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	f := newForest(spans)
	a, err := analyze(f)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(a)
	}
	if err := f.write(stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	return a.write(stdout)
}

// Analysis is what explain finds in one trace; -json prints it.
type Analysis struct {
	TraceID   string `json:"trace_id"`
	Root      string `json:"root"`
	Outcome   string `json:"outcome,omitempty"`
	Diagnosis string `json:"diagnosis,omitempty"`
	WallMs    int64  `json:"wall_ms"`
	// Calls are the root's retrace.calls; LeafSpans the spans beneath which
	// no other retrace span started, but those a policy refused (they
	// called nothing: see Refused); WorstCase the root's
	// retrace.calls.worst_case, the most leaf calls the layers could make,
	// those of hidden layers too (0: the root does not say).
	Calls     int64 `json:"calls"`
	LeafSpans int   `json:"leaf_spans"`
	WorstCase int64 `json:"worst_case"`
	// Roots are retrace's roots in a trace that another system's span
	// begins (a workflow's, whose activity attempts are each a retrace
	// root): Calls are then theirs added up, and WorstCase the largest of
	// theirs, which counts the attempts of the layer around them already.
	// 0 when the trace's root is retrace's.
	Roots int `json:"retrace_roots,omitempty"`
	// Uncounted are the leaf spans that retrace.calls does not count, by
	// why (retrace.uncounted: unsent, handshake, notification).
	Uncounted map[string]int `json:"uncounted,omitempty"`
	// Nested are the retrying layers, outermost first, of the longest chain
	// the trace announced; Product is their worst case.
	Nested  []NestedLayer `json:"nested,omitempty"`
	Product int64         `json:"product,omitempty"`
	// BackoffMs is the backoff the retries waited, as configured (the spans'
	// retrace.retry.delay_ms); CallingMs the leaf calls' time.
	BackoffMs    int64        `json:"backoff_ms"`
	BackoffWaits int          `json:"backoff_waits"`
	CallingMs    float64      `json:"calling_ms"`
	Refused      []Refusal    `json:"refused,omitempty"`
	Breakers     []Breaker    `json:"breakers,omitempty"`
	Decisions    []Decision   `json:"decisions,omitempty"`
	Budget       *Budget      `json:"budget,omitempty"`
	Errors       []ErrorCount `json:"errors,omitempty"`
	Links        Links        `json:"links"`
	Advice       []Advice     `json:"advice"`
}

// Links is what the trace's parent links held, and how explain read them.
type Links struct {
	Spans int `json:"spans"` // the spans analysed
	// Orphans are spans whose parent is not in the trace: each is drawn as
	// the top of a tree of its own, and analysed. FromOrphan: the trace
	// has no root, and is read from its first orphan (see forest.root).
	Orphans    int  `json:"orphans,omitempty"`
	FromOrphan bool `json:"from_orphan,omitempty"`
	// Cycles are the parent cycles, CycleSpans the spans in them: each is
	// cut at its earliest span, drawn as a top, and analysed.
	Cycles     int `json:"cycles,omitempty"`
	CycleSpans int `json:"cycle_spans,omitempty"`
	// Duplicates are the spans left out because an earlier span has their
	// span ID.
	Duplicates int `json:"duplicates,omitempty"`
	Depth      int `json:"depth"` // the deepest span's levels below its top
}

// NestedLayer is one retrying layer of a chain.
type NestedLayer struct {
	Layer       string `json:"layer"`
	MaxAttempts int    `json:"max_attempts"` // 0: unknown
	// Hidden is a layer whose attempts have no spans: a handler's own
	// retries, declared to retrace (an SDK's, by WithInnerAttempts).
	Hidden bool `json:"hidden,omitempty"`
	// SDK is an SDK's retry loop whose requests are spans of their own
	// (retrace's SDK middleware), numbered by http.request.resend_count.
	SDK bool `json:"sdk,omitempty"`
}

// Refusal is the calls one policy refused in one layer (for a tool's
// layer, one tool): the leaf spans that ended circuit_open, bulkhead_full
// or rate_limited, which called nothing.
type Refusal struct {
	Policy string `json:"policy"` // retrace.policy of the policy span that refused (circuit_breaker, bulkhead), else the one error.type names
	Layer  string `json:"layer"`
	Tool   string `json:"tool,omitempty"`
	Type   string `json:"type"` // error.type: circuit_open, bulkhead_full, rate_limited
	Count  int    `json:"count"`
}

// Decision is a layer call that a breaker, bulkhead or budget stopped.
type Decision struct {
	Span      string `json:"span"`
	Outcome   string `json:"outcome"`
	Diagnosis string `json:"diagnosis,omitempty"`
}

// Breaker is what the circuit breaker of one layer (for a tool's layer,
// one tool) did in the trace, read off its policy spans.
type Breaker struct {
	Name     string `json:"name"` // what it guards: "tool search_docs", "layer model"
	Layer    string `json:"layer"`
	Tool     string `json:"tool,omitempty"`
	Rejected int    `json:"rejected"` // calls it refused, open
	Probes   int    `json:"probes"`   // calls it let through half open
	Closed   int    `json:"closed"`   // calls it let through closed, where recorded
}

// Budget is what the task's retry budget did.
type Budget struct {
	Refusals  int   `json:"refusals"`  // layer calls it stopped (retrace.outcome=budget_exhausted)
	Remaining int64 `json:"remaining"` // the fewest retries left on any layer span
}

// ErrorCount is the failed leaf calls of one class and type.
type ErrorCount struct {
	Class string `json:"class"` // retrace.error.class, or unclassified for a failed span that carries none
	Type  string `json:"type,omitempty"`
	Count int    `json:"count"`
}

// unclassified stands for the class of a failed span that carries no
// retrace.error.class (retrace's layers always write one): an error entry
// is never blank.
const unclassified = "unclassified"

// Advice is one thing to change, with what it is about.
type Advice struct {
	Kind string `json:"kind"` // single_owner, hidden_retries, sdk_retries, add_rule, add_breaker
	Text string `json:"text"`
}

// refusalPolicy names the policy that refuses a call with errorType, for a
// refusal with no policy span of its own beneath it (a rate limiter
// failsafe-go runs); "" for an error.type that is no refusal.
func refusalPolicy(errorType string) string {
	switch errorType {
	case "circuit_open":
		return telemetry.PolicyCircuitBreaker
	case "bulkhead_full":
		return telemetry.PolicyBulkhead
	case "rate_limited":
		return "rate_limiter"
	}
	return ""
}

// refused reports whether n ended refused by a policy that called nothing,
// by the rule retracetest.TraceCounts counts leaf spans with.
func (n *node) refused() bool {
	return refusalPolicy(n.str(semconv.ErrorType)) != ""
}

// guards names what a layer's policy guards: its tool, else its layer.
func guards(layer, tool string) string {
	if tool != "" {
		return "tool " + tool
	}
	return "layer " + layer
}

// analyze reads the forest from its root (forest.root). Every loop is over
// the spans once, or over a span's children once, so that the analysis is
// linear in the spans.
func analyze(f *forest) (*Analysis, error) {
	root := f.root()
	if root == nil {
		// Every top is a cut cycle's.
		first := f.tops[0]
		return nil, fmt.Errorf("trace %s has no root, no span without a parent: every span lies in or beneath a parent cycle (%s, %s; span %s %q: %s)",
			f.traceID, plural(f.cycles, "cycle"), plural(len(f.all), "span"), first.s.SpanContext().SpanID(), first.s.Name(), cycleNote(first))
	}
	a := &Analysis{Advice: []Advice{}}
	a.TraceID = root.s.SpanContext().TraceID().String()
	a.Root = root.s.Name()
	a.WallMs = root.s.EndTime().Sub(root.s.StartTime()).Milliseconds()
	roots := retraceRoots(root, f.all)
	if len(roots) > 0 && roots[0] != root {
		a.Roots = len(roots)
	}
	for _, r := range roots {
		a.Calls += r.num(telemetry.Calls)
		a.WorstCase = max(a.WorstCase, r.num(telemetry.CallsWorstCase))
	}
	if len(roots) > 0 {
		last := roots[len(roots)-1]
		a.Outcome, a.Diagnosis = last.str(telemetry.Outcome), last.str(telemetry.Diagnosis)
	}
	a.Links = Links{Spans: len(f.all), Orphans: f.count(topOrphan), Cycles: f.cycles, CycleSpans: f.inCycles,
		Duplicates: f.duplicates, Depth: f.deepest, FromOrphan: root.top == topOrphan}

	errs, refusals := map[[2]string]int{}, map[Refusal]int{}
	var calling time.Duration
	for _, n := range f.all {
		if !n.retrace() || n.isPolicy() {
			continue
		}
		leaf := true
		for _, k := range n.kids {
			if k.retrace() {
				leaf = false
				break
			}
		}
		switch {
		case leaf && n.refused():
			a.refuse(n, refusals)
		case leaf && n.has(telemetry.Uncounted):
			if a.Uncounted == nil {
				a.Uncounted = map[string]int{}
			}
			a.Uncounted[n.str(telemetry.Uncounted)]++
		case leaf:
			a.LeafSpans++
			calling += n.s.EndTime().Sub(n.s.StartTime())
			if n.failed() {
				class := n.str(telemetry.ErrorClass)
				if class == "" {
					class = unclassified
				}
				errs[[2]string{class, n.str(semconv.ErrorType)}]++
			}
		}
		if n.isAttempt() && n.has(telemetry.RetryDelayMs) {
			a.BackoffMs += n.num(telemetry.RetryDelayMs)
			a.BackoffWaits++
		}
	}
	a.CallingMs = float64(calling.Microseconds()) / 1000
	for k, c := range errs {
		a.Errors = append(a.Errors, ErrorCount{Class: k[0], Type: k[1], Count: c})
	}
	sort.Slice(a.Errors, func(i, j int) bool {
		if a.Errors[i].Count != a.Errors[j].Count {
			return a.Errors[i].Count > a.Errors[j].Count
		}
		return a.Errors[i].Class+a.Errors[i].Type < a.Errors[j].Class+a.Errors[j].Type
	})

	a.Nested, a.Product = nesting(roots, f.all)
	a.Breakers = breakers(f.all)
	for _, n := range f.all {
		if o := n.str(telemetry.Outcome); n.isLayer() && (o == string(telemetry.OutcomeRejected) || o == string(telemetry.OutcomeBudgetExhausted)) {
			a.Decisions = append(a.Decisions, Decision{Span: n.s.Name(), Outcome: o, Diagnosis: n.str(telemetry.Diagnosis)})
		}
	}
	a.Budget = budget(f.all)
	a.Advice = append(advise(a, f.all), adviseAround(a, roots)...)
	return a, nil
}

// retraceRoots are the spans that carry retrace.calls, retrace's roots, by
// start time: root itself when it is one, else those beneath it, or
// anywhere in the trace (a workflow's trace holds one per activity
// attempt). An empty result: no span of the trace is retrace's root.
func retraceRoots(root *node, all []*node) []*node {
	if root.has(telemetry.Calls) {
		return []*node{root}
	}
	var out []*node
	for _, n := range all {
		if n.has(telemetry.Calls) && n.isLayer() {
			out = append(out, n)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].s.StartTime().Before(out[j].s.StartTime()) })
	return out
}

// adviseAround advises on the layer around retrace's roots, when a trace
// holds several (the attempts of a durable engine's retry): a failure that
// retrying cannot fix, called again by it; a loop without a limit around
// layers that retry.
func adviseAround(a *Analysis, roots []*node) []Advice {
	var out []Advice
	if a.Roots >= 2 {
		for _, r := range roots[:len(roots)-1] {
			switch class := r.str(telemetry.ErrorClass); class {
			case "permanent", "fatal", "context_overflow", "programming", "user_action":
				out = append(out, Advice{Kind: "outer_retry", Text: fmt.Sprintf(
					"a %s failure (%s) ended retrace's call, and the layer around it (%s) called it again, %d calls in all: let retrace's class decide that layer's retries (contrib/temporal's interceptor makes Temporal stop on it)",
					class, r.str(semconv.ErrorType), a.Root, a.Roots)})
				return out
			}
		}
	}
	for i, l := range a.Nested {
		if l.MaxAttempts == 0 && !l.Hidden && i+1 < len(a.Nested) {
			out = append(out, Advice{Kind: "unbounded", Text: fmt.Sprintf(
				"%s retries without a limit around %s(%d): no worst case holds; give it a limit (Temporal: the activity's RetryPolicy.MaximumAttempts)",
				l.Layer, a.Nested[i+1].Layer, a.Nested[i+1].MaxAttempts)})
		}
	}
	return out
}

// refuse counts the refused leaf span n under the policy that refused it:
// the policy span beneath n that ended with n's error.type, else the policy
// that error.type names. index finds a refusal already counted, by its
// fields without the count.
func (a *Analysis) refuse(n *node, index map[Refusal]int) {
	typ := n.str(semconv.ErrorType)
	r := Refusal{Policy: refusalPolicy(typ), Layer: n.str(telemetry.Layer), Type: typ}
	for _, k := range n.kids {
		if k.isPolicy() && k.str(semconv.ErrorType) == typ {
			r.Policy, r.Layer = k.str(telemetry.Policy), k.str(telemetry.Layer)
			break
		}
	}
	l := n
	if !n.isLayer() {
		l = n.layer
	}
	if l != nil {
		r.Layer = cmp.Or(r.Layer, l.str(telemetry.Layer))
		r.Tool = l.str(semconv.GenAIToolName)
	}
	if i, ok := index[r]; ok {
		a.Refused[i].Count++
		return
	}
	index[r] = len(a.Refused)
	r.Count = 1
	a.Refused = append(a.Refused, r)
}

// nesting reads the longest chain of retrying layers the root announced
// (retrace.nested_retry), and marks the layers whose attempts have no spans.
func nesting(roots []*node, all []*node) ([]NestedLayer, int64) {
	var chain []NestedLayer
	var product int64
	var events []sdktrace.Event
	for _, r := range roots {
		events = append(events, r.s.Events()...)
	}
	for _, ev := range events {
		if ev.Name != telemetry.EventNestedRetry {
			continue
		}
		var layers string
		var worst int64
		for _, kv := range ev.Attributes {
			switch kv.Key {
			case telemetry.NestedLayers:
				layers = kv.Value.AsString()
			case telemetry.CallsWorstCase:
				worst = kv.Value.AsInt64()
			}
		}
		c := parseChain(layers)
		if len(c) > len(chain) || len(c) == len(chain) && worst > product {
			chain, product = c, worst
		}
	}
	visible, spanned, resent := map[string]bool{}, map[string]bool{}, false
	if len(roots) >= 2 {
		// Retrace's roots are the attempts of the layer around them, each
		// a root of the layer they are named by: its attempts are seen.
		for _, r := range roots {
			visible[r.str(telemetry.Layer)] = true
		}
	}
	for _, n := range all {
		if n.isLayer() {
			spanned[n.str(telemetry.Layer)] = true
			if n.retries() {
				visible[n.str(telemetry.Layer)] = true
			}
		}
		resent = resent || n.num(semconv.HTTPResendCount) > 0
	}
	for i := range chain {
		l := &chain[i]
		switch {
		case visible[l.Layer]:
		case !spanned[l.Layer] && resent:
			// A retry loop with no span of its own whose requests say
			// which resend they are: an SDK seen through its middleware.
			l.SDK = true
		default:
			l.Hidden = true
		}
	}
	return chain, product
}

// parseChain reads retrace.nested.layers: "runtime(3) × session(4)", a
// layer of unknown limit written "(?)".
func parseChain(s string) []NestedLayer {
	var out []NestedLayer
	for _, part := range strings.Split(s, "×") {
		part = strings.TrimSpace(part)
		open := strings.LastIndexByte(part, '(')
		if open <= 0 || !strings.HasSuffix(part, ")") {
			continue
		}
		n, _ := strconv.Atoi(part[open+1 : len(part)-1])
		out = append(out, NestedLayer{Layer: part[:open], MaxAttempts: n})
	}
	return out
}

// breakers gathers the breaker spans by what they guard: the layer the
// policy span names and, in a tool's layer, the tool.
func breakers(all []*node) []Breaker {
	type guard struct{ layer, tool string }
	byGuard := map[guard]*Breaker{}
	var order []*Breaker
	for _, n := range all {
		if n.str(telemetry.Policy) != telemetry.PolicyCircuitBreaker {
			continue
		}
		g := guard{layer: n.str(telemetry.Layer)}
		if n.layer != nil {
			g.layer = cmp.Or(g.layer, n.layer.str(telemetry.Layer))
			g.tool = n.layer.str(semconv.GenAIToolName)
		}
		b, ok := byGuard[g]
		if !ok {
			b = &Breaker{Name: guards(g.layer, g.tool), Layer: g.layer, Tool: g.tool}
			byGuard[g] = b
			order = append(order, b)
		}
		switch n.str(telemetry.CircuitState) {
		case telemetry.CircuitOpen:
			b.Rejected++
		case telemetry.CircuitHalfOpen:
			b.Probes++
		case telemetry.CircuitClosed:
			b.Closed++
		}
	}
	var out []Breaker
	for _, b := range order {
		out = append(out, *b)
	}
	return out
}

func budget(all []*node) *Budget {
	var b *Budget
	for _, n := range all {
		if !n.isLayer() || !n.has(telemetry.BudgetLeft) {
			continue
		}
		if b == nil {
			b = &Budget{Remaining: n.num(telemetry.BudgetLeft)}
		}
		b.Remaining = min(b.Remaining, n.num(telemetry.BudgetLeft))
		if n.str(telemetry.Outcome) == string(telemetry.OutcomeBudgetExhausted) {
			b.Refusals++
		}
	}
	return b
}

// advise derives what to change from the analysis and the spans. Each rule
// reads attributes, never a scenario's or a span's name.
func advise(a *Analysis, all []*node) []Advice {
	out := []Advice{}
	var visible []NestedLayer
	for _, l := range a.Nested {
		if !l.Hidden && l.MaxAttempts > 1 {
			visible = append(visible, l)
		}
	}
	worst := max(a.WorstCase, a.Product)

	// Two visible layers that both retried a transient error: one should
	// own the retries.
	if len(visible) >= 2 && retriedTransient(all, visible[0].Layer) && retriedTransient(all, visible[1].Layer) {
		outer, inner := visible[0], visible[1]
		cut := worst / int64(outer.MaxAttempts)
		fix := fmt.Sprintf("set %s's MaxAttempts to 1 and let %s own the retries", outer.Layer, inner.Layer)
		if outer.Layer == "runtime" {
			fix = "runtime.Config{SingleOwner: true}"
		}
		out = append(out, Advice{Kind: "single_owner", Text: fmt.Sprintf("%s and %s both retry transient errors: %s cuts the worst case from %d to %d",
			outer.Layer, inner.Layer, fix, worst, cut)})
	}

	// A handler's own retries beneath a retrying layer, with no span each.
	for i, l := range a.Nested {
		if !l.Hidden || l.MaxAttempts <= 1 || i == 0 {
			continue
		}
		above := a.Nested[i-1].Layer
		out = append(out, Advice{Kind: "hidden_retries", Text: fmt.Sprintf(
			"the SDK's own retries (%d attempts per %s call, no span each) run under a retrying %s: turn them off or install retrace's SDK middleware; off, the worst case is %d, not %d",
			l.MaxAttempts, l.Layer, above, worst/int64(l.MaxAttempts), worst)})
	}

	// SDK requests retried in the open (http.request.resend_count) beneath
	// a retrying layer.
	resent, under := int64(0), ""
	for _, n := range all {
		if c := n.num(semconv.HTTPResendCount); c > 0 && c > resent {
			resent = c
			if n.retrying != nil {
				under = n.retrying.str(telemetry.Layer)
			}
		}
	}
	if resent > 0 && under != "" {
		out = append(out, Advice{Kind: "sdk_retries", Text: fmt.Sprintf(
			"the SDK's own retries (up to %d resends per request, http.request.resend_count) run under a retrying %s: turn them off and let %s own the retries; each SDK attempt multiplies the worst case by %d",
			resent, under, under, resent+1)})
	}

	// A failure that cannot be fixed by retrying, retried all the same; or
	// an error no rule knows, failing identically every time.
	for _, l := range all {
		if !l.isLayer() {
			continue
		}
		var attempts []*node
		for _, k := range l.kids {
			if k.isAttempt() {
				attempts = append(attempts, k)
			}
		}
		if len(attempts) < 2 {
			continue
		}
		first := attempts[0]
		class, typ := first.str(telemetry.ErrorClass), first.str(semconv.ErrorType)
		switch class {
		case "permanent", "fatal", "context_overflow", "programming":
			out = append(out, Advice{Kind: "add_rule", Text: fmt.Sprintf(
				"a %s error (%s) was retried by %s, %d attempts: the layer's classifier does not see what the error is; add a rule (policies.NewClassifier) so that it stops at once",
				class, typ, l.str(telemetry.Layer), len(attempts))})
		case "unknown":
			same := true
			for _, at := range attempts {
				same = same && at.failed() && at.str(semconv.ErrorType) == typ
			}
			if same {
				out = append(out, Advice{Kind: "add_rule", Text: fmt.Sprintf(
					"an error no rule recognises (%s) was retried by %s %d times and failed identically each time: add a rule (policies.NewClassifier) that classifies it",
					typ, l.str(telemetry.Layer), len(attempts))})
			}
		}
	}

	// Every leaf call failed alike and no breaker acted: a breaker would
	// have stopped the calls.
	if len(a.Breakers) == 0 && len(a.Errors) == 1 && a.Errors[0].Class == string(policies.Transient) && a.Errors[0].Count >= 5 &&
		a.Errors[0].Count == a.LeafSpans && a.Outcome != string(telemetry.OutcomeSuccess) && a.Outcome != string(telemetry.OutcomeSuccessAfterRetry) {
		out = append(out, Advice{Kind: "add_breaker", Text: fmt.Sprintf(
			"all %d calls failed alike (%s %s) and no circuit breaker acted: a breaker on the called layer (policies.NewCircuitBreaker, 5 failures) would have refused the rest at once",
			a.Errors[0].Count, a.Errors[0].Class, a.Errors[0].Type)})
	}
	return out
}

// retriedTransient reports whether some call through layer retried after a
// transient failure: an attempt failed transient, and a later attempt of
// the same call followed.
func retriedTransient(all []*node, layer string) bool {
	for _, n := range all {
		if n.isAttempt() && n.str(telemetry.ErrorClass) == string(policies.Transient) && n.up != nil && n.up.str(telemetry.Layer) == layer &&
			n.num(telemetry.Attempt) < n.up.lastAttempt {
			return true
		}
	}
	return false
}

// write prints the analysis for a person.
func (a *Analysis) write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "explain %s (%s", a.TraceID, a.Root)
	if a.Outcome != "" {
		fmt.Fprintf(&b, ", %s", a.Outcome)
	}
	fmt.Fprintf(&b, ", %s)\n", time.Duration(a.WallMs)*time.Millisecond)
	fmt.Fprintf(&b, "  calls       %s in the trace (%s", plural(a.Calls, "leaf call"), plural(a.LeafSpans, "leaf span"))
	refused := 0
	for _, r := range a.Refused {
		refused += r.Count
	}
	if refused > 0 {
		fmt.Fprintf(&b, "; %s refused, calling nothing", plural(refused, "call"))
	}
	for _, why := range slices.Sorted(maps.Keys(a.Uncounted)) {
		fmt.Fprintf(&b, "; %d %s, not counted", a.Uncounted[why], why)
	}
	b.WriteString(")")
	var hidden []string
	for _, l := range a.Nested {
		if l.Hidden {
			hidden = append(hidden, l.Layer+"'s")
		}
	}
	switch {
	case a.WorstCase > 0 && len(hidden) > 0:
		fmt.Fprintf(&b, "; at worst the layers could make %d, counting %s hidden attempts, which the trace does not see\n", a.WorstCase, strings.Join(hidden, " and "))
	case a.WorstCase > 0:
		fmt.Fprintf(&b, "; at worst the layers could make %d\n", a.WorstCase)
	default:
		b.WriteString("; the root records no worst case\n")
	}
	if a.Roots > 0 {
		fmt.Fprintf(&b, "  roots       %s beneath %s, each an attempt of the layer around retrace: the calls are theirs added up\n",
			plural(a.Roots, "retrace root"), a.Root)
	}
	if len(a.Nested) > 0 {
		fmt.Fprintf(&b, "  nested      %s = %d\n", a.chain(), a.Product)
	}
	fmt.Fprintf(&b, "  waiting     %s in %d backoffs (as configured) against %s calling\n",
		time.Duration(a.BackoffMs)*time.Millisecond, a.BackoffWaits, time.Duration(a.CallingMs*float64(time.Millisecond)).Round(10*time.Microsecond))
	for _, r := range a.Refused {
		fmt.Fprintf(&b, "  refused     %s by the %s of %s (%s)\n", plural(r.Count, "call"), r.Policy, guards(r.Layer, r.Tool), r.Type)
	}
	for _, br := range a.Breakers {
		fmt.Fprintf(&b, "  breaker     %s: refused %d, probed %d\n", br.Name, br.Rejected, br.Probes)
	}
	for _, d := range a.Decisions {
		fmt.Fprintf(&b, "  stopped     %s, %s", d.Span, d.Outcome)
		if d.Diagnosis != "" {
			fmt.Fprintf(&b, ": %s", shorten(d.Diagnosis, 160))
		}
		b.WriteString("\n")
	}
	if a.Budget != nil {
		fmt.Fprintf(&b, "  budget      %d retries left; it stopped %d layer calls\n", a.Budget.Remaining, a.Budget.Refusals)
	}
	if len(a.Errors) > 0 {
		var parts []string
		for _, e := range a.Errors {
			parts = append(parts, strings.TrimSpace(fmt.Sprintf("%d × %s %s", e.Count, e.Class, e.Type)))
		}
		fmt.Fprintf(&b, "  errors      %s\n", strings.Join(parts, ", "))
	}
	if l := a.Links; l.Orphans+l.Cycles+l.Duplicates > 0 {
		var parts []string
		if l.FromOrphan {
			parts = append(parts, "no root: read from the first orphan")
		}
		if l.Orphans > 0 {
			parts = append(parts, plural(l.Orphans, "orphan")+" (parent not in the trace), each a tree of its own")
		}
		if l.Cycles > 0 {
			parts = append(parts, fmt.Sprintf("%s of %s, each cut at its earliest span", plural(l.Cycles, "parent cycle"), plural(l.CycleSpans, "span")))
		}
		if l.Duplicates > 0 {
			parts = append(parts, plural(l.Duplicates, "span")+" left out, an earlier span having its span ID")
		}
		fmt.Fprintf(&b, "  links       %s\n", strings.Join(parts, "; "))
	}
	if len(a.Advice) == 0 {
		b.WriteString("\nadvice: nothing to change that the trace shows\n")
	} else {
		b.WriteString("\nadvice:\n")
		for _, ad := range a.Advice {
			fmt.Fprintf(&b, "  - %s\n", ad.Text)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// chain writes the nested retrying layers, outermost first:
// "runtime(3) × session(4) × model(3) hidden", a layer of unknown limit
// written "(?)".
func (a *Analysis) chain() string {
	var parts []string
	for _, l := range a.Nested {
		p := fmt.Sprintf("%s(%d)", l.Layer, l.MaxAttempts)
		if l.MaxAttempts == 0 {
			p = l.Layer + "(?)"
		}
		if l.Hidden {
			p += " hidden"
		}
		if l.SDK {
			p += " sdk"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " × ")
}

// plural writes n and word, with an s when n is not 1.
func plural[N int | int64](n N, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
