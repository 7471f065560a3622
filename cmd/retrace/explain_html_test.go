package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// explainPage runs retrace explain -html with args and returns the page.
func explainPage(t *testing.T, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "page.html")
	stdout, _ := explainRun(t, 0, append(args, "-html", out)...)
	require.Contains(t, stdout, "wrote "+out)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	return string(b)
}

// otlpSpans reads an OTLP JSON file the way a reader other than explain
// would: the spans of each trace, by trace ID, and the traces' order.
func otlpSpans(t *testing.T, path string) (order []string, byTrace map[string][]*tracepb.Span) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rs, err := setup.ReadOTLPJSON(f)
	require.NoError(t, err)
	byTrace = map[string][]*tracepb.Span{}
	for _, r := range rs {
		for _, ss := range r.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				id := fmt.Sprintf("%x", s.GetTraceId())
				if _, ok := byTrace[id]; !ok {
					order = append(order, id)
				}
				byTrace[id] = append(byTrace[id], s)
			}
		}
	}
	return order, byTrace
}

// rootInt is an integer attribute of the trace's root span (no parent).
func rootInt(t *testing.T, spans []*tracepb.Span, key attribute.Key) int64 {
	t.Helper()
	for _, s := range spans {
		if len(s.GetParentSpanId()) != 0 {
			continue
		}
		for _, kv := range s.GetAttributes() {
			if kv.GetKey() == string(key) {
				return kv.GetValue().GetIntValue()
			}
		}
	}
	t.Fatalf("the root has no %s", key)
	return 0
}

var (
	rowRe   = regexp.MustCompile(`<div class="row [^"]*" role="button" tabindex="0" aria-expanded="false" aria-controls="(a\d+-\d+)" data-span="([0-9a-f]{16})"`)
	countRe = regexp.MustCompile(`data-count="([a-z-]+)">([^<]*)<`)
)

// counts reads the header's counts of the page's n-th trace section.
func counts(t *testing.T, section string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range countRe.FindAllStringSubmatch(section, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// has and hasNot check the page for a text, and say which text failed
// without quoting the whole page.
func has(t *testing.T, page, want string, msg ...any) {
	t.Helper()
	if !strings.Contains(page, want) {
		t.Errorf("the page lacks %q %v", want, msg)
	}
}

func hasNot(t *testing.T, page, unwanted string, msg ...any) {
	t.Helper()
	if i := strings.Index(page, unwanted); i >= 0 {
		t.Errorf("the page holds %q %v, at …%s…", unwanted, msg, page[max(i-80, 0):min(i+80, len(page))])
	}
}

// sections splits the page into its trace sections.
func sections(page string) []string {
	parts := strings.Split(page, `<section class="trace"`)
	return parts[1:]
}

// The always-503 demo's page: a row per span of the trace, each a button
// with its attribute table; the header's counts those of the root span;
// the backoffs drawn with their configured delays; nothing the page loads
// from anywhere.
func TestExplainHTMLAlways503(t *testing.T) {
	file := demoTrace(t, "always-503")
	order, byTrace := otlpSpans(t, file)
	require.Len(t, order, 1)
	spans := byTrace[order[0]]
	page := explainPage(t, "-otlp-file", file)

	secs := sections(page)
	require.Len(t, secs, 1)
	rows := rowRe.FindAllStringSubmatch(secs[0], -1)
	require.Len(t, rows, len(spans), "one row per span")
	ids := map[string]bool{}
	for _, s := range spans {
		ids[fmt.Sprintf("%x", s.GetSpanId())] = true
	}
	for _, r := range rows {
		assert.True(t, ids[r[2]], "row for span %s, which the trace holds", r[2])
		has(t, secs[0], `<div class="attrs" id="`+r[1]+`" hidden>`, "each row controls its attribute table")
	}
	c := counts(t, secs[0])
	a := explainJSON(t, "-otlp-file", file)
	assert.Equal(t, strconv.FormatInt(rootInt(t, spans, telemetry.Calls), 10), c["calls"])
	assert.Equal(t, strconv.FormatInt(rootInt(t, spans, telemetry.CallsWorstCase), 10), c["worst-case"])
	assert.Equal(t, strconv.Itoa(a.LeafSpans), c["leaf-spans"])
	assert.Equal(t, strconv.Itoa(len(spans)), c["spans"])
	assert.Equal(t, fmt.Sprintf("runtime(3) × session(4) = %d", a.Product), c["product"])
	for _, ad := range a.Advice {
		has(t, page, "<li>"+ad.Text+"</li>", "the analysis's advice, as explain gives it")
	}
	has(t, page, a.Diagnosis)

	// Each attempt after a backoff has its gap, labelled with the delay
	// the span says was configured.
	var delays []string
	for _, s := range spans {
		for _, kv := range s.GetAttributes() {
			if kv.GetKey() == string(telemetry.RetryDelayMs) {
				delays = append(delays, short(time.Duration(kv.GetValue().GetIntValue())*time.Millisecond))
			}
		}
	}
	require.Len(t, delays, a.BackoffWaits)
	assert.Equal(t, len(delays), strings.Count(page, `<span class="gap"`))
	for _, d := range delays {
		has(t, page, `<span class="gl">backoff `+d+`</span>`)
	}
	assertOffline(t, page)
	assert.Less(t, len(page), 1<<20)
}

// tagRe finds the page's tags and attrRe their attributes: names, each
// with a value quoted or not, or none.
var (
	tagRe  = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9]*)((?:\s+[^\s"'>/=]+(?:=(?:"[^"]*"|'[^']*'|[^\s"'>]+))?)*)\s*/?>`)
	attrRe = regexp.MustCompile(`\s+([^\s"'>/=]+)(?:=(?:"[^"]*"|'[^']*'|[^\s"'>]+))?`)
)

// assertOffline checks that the page names nothing to load and runs
// nothing but its script: no element with a source or a handler, no link
// but to its own fragments, no CSS url() or @import, and a policy
// that lets the browser fetch nothing and run only the page's own script.
func assertOffline(t *testing.T, page string) {
	t.Helper()
	tags := tagRe.FindAllStringSubmatch(page, -1)
	divs := 0
	for _, tag := range tags {
		if tag[1] == "div" {
			divs++
		}
	}
	assert.Equal(t, strings.Count(page, "<div"), divs, "every tag read")
	for _, tag := range tags {
		for _, a := range attrRe.FindAllStringSubmatch(tag[2], -1) {
			name := strings.ToLower(a[1])
			switch {
			case strings.HasPrefix(name, "on"):
				t.Errorf("<%s> has a handler, %s", tag[1], name)
			case name == "src" || name == "srcset" || name == "poster" || name == "action" || name == "formaction" || name == "ping" || name == "background" || name == "data":
				t.Errorf("<%s> loads something: %s", tag[1], name)
			}
		}
	}
	hasNot(t, page, "url(")
	hasNot(t, page, "@import")
	hasNot(t, page, "<link")
	for _, m := range regexp.MustCompile(`href="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		assert.True(t, strings.HasPrefix(m[1], "#"), "href %q leaves the page", m[1])
	}
	assert.True(t, regexp.MustCompile(`<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-[A-Za-z0-9+/=]+';`).MatchString(page), "the page's policy")
	assert.Equal(t, 1, strings.Count(page, "<script"), "one script, the page's own")
}

// The hidden-layer demo: each call of the layer whose attempts have no
// span gets a ghost row, which is not a span's row.
func TestExplainHTMLGhostRows(t *testing.T) {
	file := demoTrace(t, "hidden-layer")
	a := explainJSON(t, "-otlp-file", file)
	var hidden NestedLayer
	for _, l := range a.Nested {
		if l.Hidden {
			hidden = l
		}
	}
	require.NotEmpty(t, hidden.Layer, "the demo declares a hidden layer")
	_, byTrace := otlpSpans(t, file)
	var layerSpans, spans int
	for _, ss := range byTrace {
		spans += len(ss)
		for _, s := range ss {
			for _, kv := range s.GetAttributes() {
				if kv.GetKey() == string(telemetry.Layer) && kv.GetValue().GetStringValue() == hidden.Layer {
					layerSpans++
				}
			}
		}
	}
	page := explainPage(t, "-otlp-file", file)
	assert.Equal(t, layerSpans, strings.Count(page, `<div class="ghost"`))
	has(t, page, fmt.Sprintf("up to %d attempts inside this call", hidden.MaxAttempts))
	assert.Len(t, rowRe.FindAllString(page, -1), spans, "ghost rows are no span's rows")
}

// hostile is a text that would run a script if a page wrote it as it is.
const hostile = `</script><img src=x onerror=alert(1)><script>alert(2)</script>"'&`

// A trace is untrusted: its names, attribute keys and values, events and
// status come out escaped, and its secrets redacted.
func TestExplainHTMLEscapesAndRedacts(t *testing.T) {
	const secret = "sk-proj-AbCdEf1234567890abcdefXYZ"
	tr := traceOf(1,
		fake{id: 1, name: "runtime" + hostile, attrs: append(rootLayer("runtime", 1), attribute.String("user.note", hostile))},
		fake{id: 2, parent: 1, name: "model", attrs: []attribute.KeyValue{
			telemetry.Layer.String("model"), telemetry.Outcome.String("failed_permanent"),
			telemetry.ErrorClass.String("permanent"), semconv.ErrorType.String(hostile),
			attribute.String("http.request.header.authorization", "Bearer "+secret),
			attribute.String("url.full", "https://api.example.com/v1?api_key="+secret),
			attribute.String(hostile, "key"),
		}, failed: "401: Incorrect API key provided: " + secret + " " + hostile},
	)
	page := explainPage(t, "-otlp-file", otlpFile(t, tr))
	hasNot(t, page, secret[8:], "no part of the key reaches the page")
	has(t, page, "[REDACTED]")
	hasNot(t, page, "<img")
	hasNot(t, page, "<script>alert")
	assert.Equal(t, 1, strings.Count(page, "<script"))
	assert.Equal(t, 1, strings.Count(page, "</script>"))
	has(t, page, "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;")
	assertOffline(t, page)
}

// The page's size is bounded by what it draws, not by the input: one
// text is capped, traces alike are drawn once past maxListed, and at most
// maxDrawnTraces are drawn.
func TestExplainHTMLSizeBound(t *testing.T) {
	t.Run("a long attribute", func(t *testing.T) {
		long := strings.Repeat("a", 1<<20)
		tr := traceOf(1, fake{id: 1, name: "runtime", attrs: append(rootLayer("runtime", 1), attribute.String("big", long))})
		page := explainPage(t, "-otlp-file", otlpFile(t, tr))
		assert.Less(t, len(page), 64<<10)
		has(t, page, strings.Repeat("a", maxHTMLText/2))
	})
	t.Run("traces alike", func(t *testing.T) {
		var traces []tracetest.SpanStubs
		for i := range 3 * maxListed {
			traces = append(traces, traceOf(byte(i+1),
				fake{id: 1, name: "runtime", attrs: rootLayer("runtime", 1)},
				fake{id: 2, parent: 1, name: "model", attrs: []attribute.KeyValue{telemetry.Layer.String("model")}}))
		}
		page := explainPage(t, "-otlp-file", otlpFile(t, traces...))
		assert.Len(t, sections(page), 1, "alike traces drawn once")
		has(t, page, fmt.Sprintf("and %d more like it", 3*maxListed-1))
		listed := 0
		for i := 2; i <= 3*maxListed; i++ {
			if strings.Contains(page, trace.TraceID{0: 0xab, 15: byte(i)}.String()) {
				listed++
			}
		}
		assert.Equal(t, maxGroupIDs, listed, "the first maxGroupIDs others listed")
	})
	t.Run("traces unlike", func(t *testing.T) {
		var traces []tracetest.SpanStubs
		for i := range maxDrawnTraces + 5 {
			traces = append(traces, traceOf(byte(i+1), fake{id: 1, name: fmt.Sprintf("runtime %d", i), attrs: rootLayer("runtime", 1)}))
		}
		page := explainPage(t, "-otlp-file", otlpFile(t, traces...))
		assert.Len(t, sections(page), maxDrawnTraces)
		assert.Equal(t, 5, strings.Count(page, "(not drawn: -trace "))
	})
}

// Several traces get an index, a link to each drawn; -trace draws one.
func TestExplainHTMLIndex(t *testing.T) {
	file := otlpFile(t,
		traceOf(1, fake{id: 1, name: "runtime", attrs: rootLayer("runtime", 1)}),
		traceOf(2, fake{id: 1, name: "session", attrs: rootLayer("session", 2)}))
	id1, id2 := trace.TraceID{0: 0xab, 15: 1}.String(), trace.TraceID{0: 0xab, 15: 2}.String()
	page := explainPage(t, "-otlp-file", file)
	assert.Len(t, sections(page), 2)
	assert.Equal(t, 2, strings.Count(page, `<tr class="entry">`))
	has(t, page, `<a href="#t1">`+id1+`</a>`)
	has(t, page, `<a href="#t2">`+id2+`</a>`)

	page = explainPage(t, "-otlp-file", file, "-trace", id2)
	assert.Len(t, sections(page), 1)
	hasNot(t, page, `<tr class="entry">`)
	has(t, page, `data-trace="`+id2+`"`)

	_, stderr := explainRun(t, 1, "-otlp-file", file, "-json", "-html", filepath.Join(t.TempDir(), "x.html"))
	assert.Contains(t, stderr, "give -json or -html, not both")
}

// stubAt is a span of trace 1 from start to end (offsets from a fixed
// instant) with the attributes given.
func stubAt(id, parent uint64, name string, start, end time.Duration, attrs ...attribute.KeyValue) tracetest.SpanStub {
	tid := trace.TraceID{0: 0xcd, 15: 1}
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	s := tracetest.SpanStub{
		Name:        name,
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: spanID(id), TraceFlags: trace.FlagsSampled}),
		StartTime:   t0.Add(start),
		EndTime:     t0.Add(end),
		Attributes:  attrs,
	}
	if parent != 0 {
		s.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: spanID(parent), TraceFlags: trace.FlagsSampled})
	}
	return s
}

// Configured time stretches each backoff gap to its configured delay and
// leaves the calls as they ran.
func TestTimelineStretchesBackoffs(t *testing.T) {
	ms := time.Millisecond
	spans := tracetest.SpanStubs{
		stubAt(1, 0, "session", 0, 100*ms, telemetry.Layer.String("session"), telemetry.Calls.Int64(2)),
		stubAt(2, 1, "attempt", 0, 10*ms, telemetry.Attempt.Int64(1)),
		stubAt(3, 1, "attempt", 30*ms, 40*ms, telemetry.Attempt.Int64(2), telemetry.RetryDelayMs.Int64(2000)),
		stubAt(4, 1, "attempt", 60*ms, 100*ms, telemetry.Attempt.Int64(3), telemetry.RetryDelayMs.Int64(4000)),
	}
	f := newForest(spans.Snapshots())
	tl := newTimeline(f)
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	assert.Equal(t, 100*ms, tl.wallTotal)
	assert.Equal(t, 100*ms-20*ms-20*ms+2000*ms+4000*ms, tl.cfgTotal)
	assert.Equal(t, 10*ms, tl.cfg(t0.Add(10*ms), true), "before the first gap: as it ran")
	assert.Equal(t, 10*ms+1000*ms, tl.cfg(t0.Add(20*ms), false), "halfway through a gap: halfway through its delay")
	assert.Equal(t, 10*ms+2000*ms, tl.cfg(t0.Add(30*ms), false))
	assert.Equal(t, 20*ms+2000*ms, tl.cfg(t0.Add(40*ms), true), "a call keeps its length")
	page := explainPage(t, "-otlp-file", otlpFile(t, spans))
	has(t, page, "configured "+short(tl.cfgTotal))
	has(t, page, "wall "+short(100*ms))
	// The second attempt's gap: 10 ms to 30 ms of 100 ms in wall time;
	// 10 ms to 2010 ms of 6060 ms configured.
	has(t, page, `<span class="gap" style="--wl:10.00%;--ww:20.00%;--cl:0.17%;--cw:33.00%"`)
}

// Each decision a span records is marked on its row, in words too.
func TestExplainHTMLMarks(t *testing.T) {
	ms := time.Millisecond
	breaker := func(state string) []attribute.KeyValue {
		return []attribute.KeyValue{telemetry.Policy.String(telemetry.PolicyCircuitBreaker), telemetry.Layer.String("model"), telemetry.CircuitState.String(state)}
	}
	failed := func(s tracetest.SpanStub, typ string) tracetest.SpanStub {
		s.Status = sdktrace.Status{Code: codes.Error, Description: typ}
		s.Attributes = append(s.Attributes, semconv.ErrorType.String(typ))
		return s
	}
	degraded := stubAt(9, 1, "budget", 70*ms, 71*ms)
	degraded.Events = []sdktrace.Event{{Name: telemetry.EventStateDegraded, Time: degraded.StartTime, Attributes: []attribute.KeyValue{
		telemetry.Policy.String(telemetry.PolicyBudget), telemetry.StateError.String(telemetry.StateTimeout)}}}
	compacted := stubAt(10, 1, "session", 72*ms, 73*ms, telemetry.Layer.String("session"))
	compacted.Events = []sdktrace.Event{{Name: telemetry.EventCompacted, Time: compacted.StartTime, Attributes: []attribute.KeyValue{
		telemetry.CompactionBefore.Int(40), telemetry.CompactionAfter.Int(12)}}}
	spans := tracetest.SpanStubs{
		stubAt(1, 0, "runtime", 0, 100*ms, rootLayer("runtime", 3)...),
		stubAt(2, 1, "circuit_breaker", 1*ms, 2*ms, breaker(telemetry.CircuitClosed)...),
		failed(stubAt(3, 1, "circuit_breaker", 3*ms, 4*ms, breaker(telemetry.CircuitOpen)...), "circuit_open"),
		stubAt(4, 1, "circuit_breaker", 60*ms, 61*ms, breaker(telemetry.CircuitHalfOpen)...),
		failed(stubAt(5, 1, "bulkhead", 62*ms, 63*ms, telemetry.Policy.String(telemetry.PolicyBulkhead)), "bulkhead_full"),
		failed(stubAt(6, 1, "timeout", 64*ms, 65*ms, telemetry.Policy.String(telemetry.PolicyTimeout)), "attempt_timeout"),
		stubAt(7, 1, "fallback", 66*ms, 69*ms, telemetry.Layer.String(telemetry.LayerFallback)),
		failed(stubAt(8, 7, "candidate a", 66*ms, 67*ms, telemetry.Layer.String(telemetry.LayerCandidate)), "insufficient_quota"),
		stubAt(11, 7, "candidate b", 67*ms, 69*ms, telemetry.Layer.String(telemetry.LayerCandidate)),
		degraded, compacted,
		stubAt(12, 1, "tool", 80*ms, 81*ms, telemetry.Layer.String("tool"), telemetry.Outcome.String(string(telemetry.OutcomeBudgetExhausted))),
	}
	page := explainPage(t, "-otlp-file", otlpFile(t, spans))
	for _, want := range []string{
		`<span class="mtext m-breaker">◆ breaker opened: refused the call</span>`,
		`<span class="mtext m-breaker">◆ breaker half-open: let a probe through</span>`,
		`<span class="mtext m-bulkhead">◆ bulkhead full: refused the call</span>`,
		`<span class="mtext m-timeout">◆ timeout fired</span>`,
		`<span class="mtext m-fallback">◆ fallback moved on: insufficient_quota, the next candidate is tried</span>`,
		`<span class="mtext m-degraded">◆ state degraded: decided on local state (budget, timeout)</span>`,
		`<span class="mtext m-compacted">◆ history compacted: 40 → 12 messages</span>`,
		`<span class="mtext m-budget">◆ task budget refused a retry</span>`,
	} {
		has(t, page, want)
	}
	assert.Equal(t, 8, strings.Count(page, `<span class="mark m-`), "one mark per decision, none for the closed breaker")
	has(t, page, `o-refused`, "the refused call reads as refused")
}

// -html reads Jaeger's answer as it reads a file: one trace, drawn.
func TestExplainHTMLFromJaeger(t *testing.T) {
	var body bytes.Buffer
	tr := failedRun(1, 3)
	require.NoError(t, setup.WriteOTLPJSON(&body, tr.Snapshots()))
	id := trace.TraceID{0: 0xab, 15: 1}.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v3/traces/"+id {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body.Bytes())
	}))
	defer srv.Close()
	page := explainPage(t, "-jaeger", srv.URL, "-trace", id)
	secs := sections(page)
	require.Len(t, secs, 1)
	has(t, secs[0], `data-trace="`+id+`"`)
	assert.Len(t, rowRe.FindAllString(secs[0], -1), len(tr))
	assertOffline(t, page)
}

// Past maxListed, only traces that would draw alike are drawn once: a
// different worst case, or an event the others lack, is a trace of its own.
func TestExplainHTMLGroupsOnlyAlike(t *testing.T) {
	var traces []tracetest.SpanStubs
	for i := range maxListed + 1 {
		traces = append(traces, traceOf(byte(i+1), fake{id: 1, name: "runtime", attrs: rootLayer("runtime", 1)}))
	}
	worse := traceOf(100, fake{id: 1, name: "runtime", attrs: append(rootLayer("runtime", 1), telemetry.CallsWorstCase.Int64(36))})
	evented := traceOf(101, fake{id: 1, name: "runtime", attrs: rootLayer("runtime", 1)})
	evented[0].Events = []sdktrace.Event{{Name: telemetry.EventNestedRetry, Time: evented[0].StartTime}}
	page := explainPage(t, "-otlp-file", otlpFile(t, append(traces, worse, evented)...))
	assert.Len(t, sections(page), 3)
	has(t, page, fmt.Sprintf("and %d more like it", maxListed))
}
