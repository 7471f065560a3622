package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// explain prints one trace's tree and what to change: the amplification,
// the nested retrying layers, the time spent waiting against calling, the
// breaker and budget decisions, the errors by class, and advice read off
// the attributes retrace writes.
func explain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jaeger := fs.String("jaeger", "", "read the trace from Jaeger's query API at `URL` (http://localhost:16686)")
	id := fs.String("trace", "", "the trace `ID` (32 hex digits); with -otlp-file, needed when the file holds several")
	file := fs.String("otlp-file", "", "read the trace from `FILE`, OTLP JSON (the demo's -otlp-file, the Collector's file exporter)")
	asJSON := fs.Bool("json", false, "print the analysis as one JSON object, without the tree")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: retrace explain (-jaeger URL -trace ID | -otlp-file FILE [-trace ID]) [-json]\n\n")
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
	var (
		spans []sdktrace.ReadOnlySpan
		err   error
	)
	switch {
	case *jaeger != "" && *file != "":
		return errors.New("explain: give -jaeger or -otlp-file, not both")
	case *jaeger != "":
		if *id == "" {
			return errors.New("explain: -jaeger needs -trace ID")
		}
		rs, ferr := fetchJaeger(ctx, *jaeger, strings.ToLower(*id))
		if ferr != nil {
			return ferr
		}
		spans, err = pickTrace(rs, *id)
	case *file != "":
		rs, ferr := readFile(*file)
		if ferr != nil {
			return ferr
		}
		spans, err = pickTrace(rs, *id)
	default:
		fs.Usage()
		return errors.New("explain: give -jaeger URL -trace ID, or -otlp-file FILE")
	}
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	a := analyze(spans)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(a)
	}
	if err := setup.WriteTree(stdout, spans); err != nil {
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
	// no other retrace span started; WorstCase the root's
	// retrace.calls.worst_case.
	Calls     int64 `json:"calls"`
	LeafSpans int   `json:"leaf_spans"`
	WorstCase int64 `json:"worst_case"`
	// Nested are the retrying layers, outermost first, of the longest chain
	// the trace announced; Product is their worst case.
	Nested  []NestedLayer `json:"nested,omitempty"`
	Product int64         `json:"product,omitempty"`
	// BackoffMs is the backoff the retries waited, as configured (the spans'
	// retrace.retry.delay_ms); CallingMs the leaf calls' time.
	BackoffMs    int64        `json:"backoff_ms"`
	BackoffWaits int          `json:"backoff_waits"`
	CallingMs    float64      `json:"calling_ms"`
	Breakers     []Breaker    `json:"breakers,omitempty"`
	Decisions    []Decision   `json:"decisions,omitempty"`
	Budget       *Budget      `json:"budget,omitempty"`
	Errors       []ErrorCount `json:"errors,omitempty"`
	Advice       []Advice     `json:"advice"`
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

// Decision is a layer call that a breaker, bulkhead or budget stopped.
type Decision struct {
	Span      string `json:"span"`
	Outcome   string `json:"outcome"`
	Diagnosis string `json:"diagnosis,omitempty"`
}

// Breaker is what one circuit breaker did in the trace.
type Breaker struct {
	Name     string `json:"name"`
	Layer    string `json:"layer"`
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
	Class string `json:"class"`
	Type  string `json:"type"`
	Count int    `json:"count"`
}

// Advice is one thing to change, with what it is about.
type Advice struct {
	Kind string `json:"kind"` // single_owner, hidden_retries, sdk_retries, add_rule, add_breaker
	Text string `json:"text"`
}

// node is a span with its attributes by key and its children.
type node struct {
	s     sdktrace.ReadOnlySpan
	attrs map[attribute.Key]attribute.Value
	kids  []*node
	up    *node
}

func (n *node) str(k attribute.Key) string { return n.attrs[k].AsString() }
func (n *node) num(k attribute.Key) int64  { return n.attrs[k].AsInt64() }
func (n *node) has(k attribute.Key) bool   { _, ok := n.attrs[k]; return ok }
func (n *node) failed() bool               { return n.s.Status().Code == codes.Error }

// isLayer: a layer span. isAttempt: an attempt span. isPolicy: a policy span.
func (n *node) isLayer() bool {
	return n.has(telemetry.Layer) && !n.has(telemetry.Attempt) && !n.has(telemetry.Policy)
}
func (n *node) isAttempt() bool { return n.has(telemetry.Attempt) }
func (n *node) isPolicy() bool  { return n.has(telemetry.Policy) }

// retrace reports whether n is a layer or attempt span.
func (n *node) retrace() bool { return n.isLayer() || n.isAttempt() }

func build(spans []sdktrace.ReadOnlySpan) (roots, all []*node) {
	byID := map[trace.SpanID]*node{}
	for _, s := range spans {
		n := &node{s: s, attrs: map[attribute.Key]attribute.Value{}}
		for _, kv := range s.Attributes() {
			n.attrs[kv.Key] = kv.Value
		}
		byID[s.SpanContext().SpanID()] = n
		all = append(all, n)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].s.StartTime().Before(all[j].s.StartTime()) })
	for _, n := range all {
		if p, ok := byID[n.s.Parent().SpanID()]; ok && n.s.Parent().IsValid() {
			p.kids = append(p.kids, n)
			n.up = p
		} else {
			roots = append(roots, n)
		}
	}
	return roots, all
}

// enclosing returns the nearest layer span above n.
func (n *node) enclosing() *node {
	for p := n.up; p != nil; p = p.up {
		if p.isLayer() {
			return p
		}
	}
	return nil
}

func analyze(spans []sdktrace.ReadOnlySpan) *Analysis {
	roots, all := build(spans)
	a := &Analysis{Advice: []Advice{}}
	if len(roots) == 0 {
		return a
	}
	root := roots[0]
	for _, r := range roots {
		if r.has(telemetry.Calls) {
			root = r
			break
		}
	}
	a.TraceID = root.s.SpanContext().TraceID().String()
	a.Root = root.s.Name()
	a.Outcome, a.Diagnosis = root.str(telemetry.Outcome), root.str(telemetry.Diagnosis)
	a.WallMs = root.s.EndTime().Sub(root.s.StartTime()).Milliseconds()
	a.Calls, a.WorstCase = root.num(telemetry.Calls), root.num(telemetry.CallsWorstCase)

	errs := map[[2]string]int{}
	var calling time.Duration
	for _, n := range all {
		if !n.retrace() || n.isPolicy() {
			continue
		}
		leaf := true
		for _, k := range n.kids {
			if k.retrace() {
				leaf = false
			}
		}
		if leaf {
			a.LeafSpans++
			calling += n.s.EndTime().Sub(n.s.StartTime())
			if n.failed() {
				errs[[2]string{n.str(telemetry.ErrorClass), n.str(telemetry.ErrorType)}]++
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

	a.Nested, a.Product = nesting(root, all)
	a.Breakers = breakers(all)
	for _, n := range all {
		if o := n.str(telemetry.Outcome); n.isLayer() && (o == "rejected" || o == "budget_exhausted") {
			a.Decisions = append(a.Decisions, Decision{Span: n.s.Name(), Outcome: o, Diagnosis: n.str(telemetry.Diagnosis)})
		}
	}
	a.Budget = budget(all)
	a.Advice = advise(a, all)
	return a
}

// nesting reads the longest chain of retrying layers the root announced
// (retrace.nested_retry), and marks the layers whose attempts have no spans.
func nesting(root *node, all []*node) ([]NestedLayer, int64) {
	var chain []NestedLayer
	var product int64
	for _, ev := range root.s.Events() {
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
	for _, n := range all {
		if n.isLayer() {
			spanned[n.str(telemetry.Layer)] = true
			if n.num(telemetry.MaxAttempts) > 1 {
				visible[n.str(telemetry.Layer)] = true
			}
		}
		resent = resent || n.num(telemetry.HTTPResendCount) > 0
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

// breakers gathers the breaker spans by the layer (and tool) they guard.
func breakers(all []*node) []Breaker {
	byName := map[string]*Breaker{}
	var order []string
	for _, n := range all {
		if n.str(telemetry.Policy) != telemetry.PolicyCircuitBreaker {
			continue
		}
		layer := n.str(telemetry.Layer)
		name := layer
		if l := n.enclosing(); l != nil {
			if t := l.str(telemetry.GenAIToolName); t != "" {
				name = t
			} else {
				name = l.s.Name()
			}
		}
		b, ok := byName[name]
		if !ok {
			b = &Breaker{Name: name, Layer: layer}
			byName[name] = b
			order = append(order, name)
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
	for _, name := range order {
		out = append(out, *byName[name])
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
		if n.str(telemetry.Outcome) == "budget_exhausted" {
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
		if c := n.num(telemetry.HTTPResendCount); c > 0 && c > resent {
			resent = c
			for p := n.up; p != nil; p = p.up {
				if p.isLayer() && p.num(telemetry.MaxAttempts) > 1 {
					under = p.str(telemetry.Layer)
					break
				}
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
		class, typ := first.str(telemetry.ErrorClass), first.str(telemetry.ErrorType)
		switch class {
		case "permanent", "fatal", "context_overflow", "programming":
			out = append(out, Advice{Kind: "add_rule", Text: fmt.Sprintf(
				"a %s error (%s) was retried by %s, %d attempts: the layer's classifier does not see what the error is; add a rule (policies.NewClassifier) so that it stops at once",
				class, typ, l.str(telemetry.Layer), len(attempts))})
		case "unknown":
			same := true
			for _, at := range attempts {
				same = same && at.failed() && at.str(telemetry.ErrorType) == typ
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
	if len(a.Breakers) == 0 && len(a.Errors) == 1 && a.Errors[0].Class == "transient" && a.Errors[0].Count >= 5 &&
		a.Errors[0].Count == a.LeafSpans && a.Outcome != "success" && a.Outcome != "success_after_retry" {
		out = append(out, Advice{Kind: "add_breaker", Text: fmt.Sprintf(
			"all %d calls failed alike (%s %s) and no circuit breaker acted: a breaker on the called layer (policies.NewCircuitBreaker, 5 failures) would have refused the rest at once",
			a.Errors[0].Count, a.Errors[0].Class, a.Errors[0].Type)})
	}
	return out
}

// retriedTransient reports whether some call through layer retried after a
// transient failure.
func retriedTransient(all []*node, layer string) bool {
	for _, n := range all {
		if n.isAttempt() && n.str(telemetry.ErrorClass) == "transient" && n.up != nil && n.up.str(telemetry.Layer) == layer {
			for _, sib := range n.up.kids {
				if sib.isAttempt() && sib.num(telemetry.Attempt) > n.num(telemetry.Attempt) {
					return true
				}
			}
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
	fmt.Fprintf(&b, "  calls       %d leaf calls (%d leaf spans) of a worst case of %d", a.Calls, a.LeafSpans, a.WorstCase)
	if a.WorstCase > 0 {
		fmt.Fprintf(&b, " (%d%%)", a.Calls*100/a.WorstCase)
	}
	b.WriteString("\n")
	if len(a.Nested) > 0 {
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
		fmt.Fprintf(&b, "  nested      %s = %d\n", strings.Join(parts, " × "), a.Product)
	}
	fmt.Fprintf(&b, "  waiting     %s in %d backoffs (as configured) against %s calling\n",
		time.Duration(a.BackoffMs)*time.Millisecond, a.BackoffWaits, time.Duration(a.CallingMs*float64(time.Millisecond)).Round(10*time.Microsecond))
	for _, br := range a.Breakers {
		fmt.Fprintf(&b, "  breaker     %s (%s): refused %d, probed %d\n", br.Name, br.Layer, br.Rejected, br.Probes)
	}
	for _, d := range a.Decisions {
		fmt.Fprintf(&b, "  stopped     %s, %s: %s\n", d.Span, d.Outcome, shorten(d.Diagnosis, 160))
	}
	if a.Budget != nil {
		fmt.Fprintf(&b, "  budget      %d retries left; it stopped %d layer calls\n", a.Budget.Remaining, a.Budget.Refusals)
	}
	if len(a.Errors) > 0 {
		var parts []string
		for _, e := range a.Errors {
			parts = append(parts, fmt.Sprintf("%d × %s %s", e.Count, e.Class, e.Type))
		}
		fmt.Fprintf(&b, "  errors      %s\n", strings.Join(parts, ", "))
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

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
