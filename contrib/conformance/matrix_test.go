package conformance_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite the README's conformance table")

var epoch = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// A path is one way a model call is made: retrace's own providers, a
// user's own SDK client under retrace's layers, an agent framework through
// its adapter.
type path struct {
	name     string
	protocol string // "openai" or "anthropic": the fault server's API it calls
	// call makes one logical model call, "hello", against srv, with env on
	// every retrace layer it builds, and returns the answer's text.
	call func(t *testing.T, ctx context.Context, srv *retracetest.Server, env env) (string, error)
}

// env is what every path's layers are given: the recorder's tracer
// provider, and a virtual clock, so that 2 s…8 s backoffs pass at once.
type env struct {
	opts []middleware.Option
	clk  clock.Clock
}

// fault is one provider behaviour. The fault server answers each fault in
// the words of the API a path calls (InsufficientQuota is OpenAI's 429
// insufficient_quota and Anthropic's 402 billing_error), so one script
// serves both protocols.
type fault struct {
	name   string
	script retracetest.Script
	// anthropic, when set, replaces script for the Anthropic paths: a
	// behaviour each protocol shows with another failure.
	anthropic retracetest.Script
}

func (f fault) scriptOf(protocol string) retracetest.Script {
	if protocol == "anthropic" && f.anthropic != nil {
		return f.anthropic
	}
	return f.script
}

var faults = []fault{
	{name: "ok", script: retracetest.Always(retracetest.OK())},
	{name: "503", script: retracetest.Always(retracetest.ServerError(503))},
	{name: "429 + Retry-After", script: retracetest.FailFirst(1, retracetest.RateLimited(5*time.Second))},
	{name: "cut stream", script: retracetest.FailFirst(1, retracetest.StreamReset(1))},
	{name: "missing terminator", script: retracetest.FailFirst(1, retracetest.StreamEOF(1))},
	{name: "quota/billing", script: retracetest.Always(retracetest.InsufficientQuota())},
	{name: "invalid key", script: retracetest.Always(retracetest.InvalidAPIKey())},
	{name: "context overflow", script: retracetest.Always(retracetest.ContextOverflow())},
	// OpenAI's event says the quota is spent; Anthropic's an overload that
	// passes.
	{name: "mid-stream error event", script: retracetest.Always(retracetest.ErrorEvent(1, "insufficient_quota", "insufficient_quota", "You exceeded your current quota.")),
		anthropic: retracetest.FailFirst(1, retracetest.ErrorEvent(1, "", "overloaded_error", "Overloaded"))},
	// Anthropic's flaky provider is overloaded, OpenAI's unavailable.
	{name: "flaky", script: retracetest.FailFirst(2, retracetest.ServerError(503)), anthropic: retracetest.FailFirst(2, retracetest.ServerError(529))},
}

// paths are the rows, registered by the files beside this one; the first
// of each protocol, retrace's own provider, is the reference.
var paths []path

// result is what one path did with one fault, as its trace says.
type result struct {
	requests  int
	leafSpans int
	calls     int64
	worst     int64
	outcome   string // the inference layer's ("chat {model}")
	class     string // the failure's, on every failed span
	errType   string
	text      string
	err       error
	disagree  string // a failed span whose class or type differs from the others, if one does
	// classified counts the classifications of raw failures, failures the
	// requests that failed (a compaction's second call is a request too).
	classified, failures int64
	spans                []sdktrace.ReadOnlySpan
}

func run(t *testing.T, p path, f fault) result {
	t.Helper()
	srv := retracetest.New(f.scriptOf(p.protocol))
	require.NoError(t, srv.Start())
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
	// Every library's spans go where retrace's do, as they do in a program
	// that exports one trace (genkit traces, and anthropic-sdk-go, through
	// the global provider; genkit.Init installs one of its own otherwise).
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)
	clk := clock.NewVirtual(epoch)
	// Every layer classifies with rules that count the raw failures they
	// read: a failure is classified once, where it is read, and carried up.
	var classified atomic.Int64
	counting := policies.NewClassifier(func(error) (policies.Classification, bool) {
		classified.Add(1)
		return policies.Classification{}, false
	})
	e := env{opts: []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(clk), middleware.WithClassifier(counting)}, clk: clk}

	// One outer layer makes every path one trace (a Session compacts and
	// calls its layer again after an overflow).
	outer := middleware.Layer[string, string]("conformance", middleware.Spec[string]{}, e.opts...)
	ctx := context.Background()
	var r result
	r.text, r.err = outer(func(ctx context.Context, _ string) (string, error) { return p.call(t, ctx, srv, e) })(ctx, "hello")
	require.NoError(t, tp.ForceFlush(ctx))
	spans := rec.Ended()
	r.spans = spans
	r.requests = srv.Requests()
	r.classified = classified.Load()
	r.failures = int64(r.requests)
	if r.err == nil {
		r.failures-- // the request that answered
	}
	traces := retracetest.ByTrace(spans)
	require.Len(t, traces, 1, "%s, %s: one trace", p.name, f.name)
	c, err := retracetest.TraceCounts(traces[0])
	require.NoError(t, err)
	r.leafSpans, r.calls, r.worst = c.LeafSpans, c.Calls, c.WorstCase
	for _, s := range spans {
		if r.outcome == "" && s.Name() != "" && strings.HasPrefix(s.Name(), "chat") && attr(s, telemetry.Layer) == "session" {
			r.outcome = attr(s, telemetry.Outcome)
		}
	}
	// The failure's class and type, as every span that failed for it says:
	// the last failed span is the outermost one.
	var failed []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Status().Code == codes.Error && attr(s, telemetry.ErrorClass) != "" {
			failed = append(failed, s)
		}
	}
	if r.err != nil && len(failed) > 0 {
		last := failed[len(failed)-1]
		r.class, r.errType = attr(last, telemetry.ErrorClass), attr(last, semconv.ErrorTypeKey)
		for _, s := range failed {
			if attr(s, telemetry.ErrorClass) != r.class || attr(s, semconv.ErrorTypeKey) != r.errType {
				r.disagree = fmt.Sprintf("%s says %s %s", s.Name(), attr(s, telemetry.ErrorClass), attr(s, semconv.ErrorTypeKey))
			}
		}
	}
	return r
}

// attr is s's attribute k as text, "" when s has none.
func attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.Emit()
		}
	}
	return ""
}

// The conformance matrix: every path, every fault. Each row must end the
// failure as the reference row of its protocol (retrace's own provider)
// ends it: the same outcome, and the same class and error.type on every
// span that failed; and each trace must count itself: requests = leaf
// spans = retrace.calls ≤ retrace.calls.worst_case.
func TestConformanceMatrix(t *testing.T) {
	if len(paths) == 0 {
		t.Fatal("no paths registered")
	}
	sort.SliceStable(paths, func(i, j int) bool { return order(paths[i].name) < order(paths[j].name) })
	table := map[string]map[string]result{}
	for _, f := range faults {
		ref := map[string]result{}
		for _, p := range paths {
			t.Run(f.name+"/"+p.name, func(t *testing.T) {
				r := run(t, p, f)
				if table[p.name] == nil {
					table[p.name] = map[string]result{}
				}
				table[p.name][f.name] = r
				if int64(r.requests) != r.calls || r.leafSpans != r.requests || r.worst < r.calls {
					for _, s := range r.spans {
						t.Log(s.Name(), s.SpanContext().SpanID(), s.Parent().SpanID(), s.InstrumentationScope().Name)
					}
					t.Errorf("counts: %d requests, %d leaf spans, retrace.calls %d, worst case %d", r.requests, r.leafSpans, r.calls, r.worst)
				}
				if r.classified != r.failures {
					t.Errorf("%d failed requests classified %d times: a failure is classified once", r.failures, r.classified)
				}
				if r.disagree != "" {
					t.Errorf("the failure's spans disagree: the root says %s %s, %s", r.class, r.errType, r.disagree)
				}
				if isReference(p) {
					ref[p.protocol] = r
					return
				}
				want, ok := ref[p.protocol]
				if !ok {
					// The reference row was filtered out (-run): run it here.
					want = run(t, reference(p.protocol), f)
					ref[p.protocol] = want
				}
				if r.outcome != want.outcome || r.class != want.class || r.errType != want.errType {
					t.Errorf("%s ends %s/%s/%s, retrace's own provider %s/%s/%s (err %v)", p.name,
						r.outcome, r.class, r.errType, want.outcome, want.class, want.errType, r.err)
				}
				if (r.err == nil) != (want.err == nil) {
					t.Errorf("%s: error %v, the reference's %v", p.name, r.err, want.err)
				}
				if r.err == nil && r.text != want.text {
					t.Errorf("%s answered %q, the reference %q", p.name, r.text, want.text)
				}
			})
		}
	}
	md := markdown(table)
	t.Log("\n" + md)
	if len(table) == len(paths) && !t.Failed() {
		checkREADME(t, md) // the whole matrix ran, and it holds
	}
}

// reference is the reference path of protocol: retrace's own provider, the
// first path of that protocol once sorted.
func reference(protocol string) path {
	for _, p := range paths {
		if p.protocol == protocol {
			return p
		}
	}
	panic("no path of protocol " + protocol)
}

func isReference(p path) bool { return reference(p.protocol).name == p.name }

// order puts the reference rows first.
func order(name string) int {
	for i, n := range []string{"retrace OpenAI provider", "retrace Anthropic provider", "own openai-go + middleware.SDK",
		"own anthropic-sdk-go + middleware.SDK", "eino", "genkit"} {
		if n == name {
			return i
		}
	}
	return 100
}

// markdown is the matrix as the README shows it: per fault, per path, the
// requests and how the call ended.
func markdown(table map[string]map[string]result) string {
	var b strings.Builder
	b.WriteString("| fault |")
	var names []string
	for _, p := range paths {
		names = append(names, p.name)
		b.WriteString(" " + p.name + " |")
	}
	b.WriteString("\n|---|")
	for range names {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, f := range faults {
		b.WriteString("| " + f.name + " |")
		for _, n := range names {
			r := table[n][f.name]
			cell := "ok"
			if r.err != nil {
				cell = r.outcome + " " + r.class + " `" + r.errType + "`"
			} else if r.outcome == "success_after_retry" {
				cell = "ok after retry"
			}
			fmt.Fprintf(&b, " %d req, %s |", r.requests, cell)
		}
		b.WriteString("\n")
	}
	return b.String()
}

const (
	beginMark = "<!-- conformance: generated by go test ./contrib/conformance -update; do not edit -->"
	endMark   = "<!-- end of conformance -->"
)

// checkREADME compares the README's table with md, or writes it with
// -update.
func checkREADME(t *testing.T, md string) {
	t.Helper()
	const readme = "../../README.md"
	data, err := os.ReadFile(readme)
	require.NoError(t, err)
	s := string(data)
	i, j := strings.Index(s, beginMark), strings.Index(s, endMark)
	if i < 0 || j < i {
		t.Fatalf("README.md has no conformance table between %q and %q", beginMark, endMark)
	}
	current := s[i+len(beginMark)+1 : j]
	if current == md {
		return
	}
	if *update {
		require.NoError(t, os.WriteFile(readme, []byte(s[:i+len(beginMark)+1]+md+s[j:]), 0o644))
		return
	}
	t.Errorf("README.md's conformance table is stale: run go test ./... -run TestConformanceMatrix -update in contrib/conformance and commit it")
}
