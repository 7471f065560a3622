package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
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

	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// fake is a span of a made-up trace: its span ID, its parent's (0: none),
// and what it carries.
type fake struct {
	id, parent uint64
	name       string
	attrs      []attribute.KeyValue
	failed     string // the status description of a failed span; "" for one that did not fail
}

func spanID(n uint64) trace.SpanID {
	var s trace.SpanID
	binary.BigEndian.PutUint64(s[:], n)
	return s
}

// traceOf makes the spans of trace number n, each started a millisecond
// after the one before it, from a fixed instant, and each a second long,
// so that every output is the same on every run.
func traceOf(n byte, spans ...fake) tracetest.SpanStubs {
	tid := trace.TraceID{0: 0xab, 15: n}
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	out := make(tracetest.SpanStubs, len(spans))
	for i, f := range spans {
		s := tracetest.SpanStub{
			Name:        f.name,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: spanID(f.id), TraceFlags: trace.FlagsSampled}),
			StartTime:   start.Add(time.Duration(i) * time.Millisecond),
			EndTime:     start.Add(time.Duration(i)*time.Millisecond + time.Second),
			Attributes:  f.attrs,
		}
		if f.parent != 0 {
			s.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: spanID(f.parent), TraceFlags: trace.FlagsSampled})
		}
		if f.failed != "" {
			s.Status = sdktrace.Status{Code: codes.Error, Description: f.failed}
		}
		out[i] = s
	}
	return out
}

// otlpFile writes each trace as a line of OTLP JSON, as the demo's
// -otlp-file does, and returns the file's path.
func otlpFile(t *testing.T, traces ...tracetest.SpanStubs) string {
	t.Helper()
	var b bytes.Buffer
	for _, tr := range traces {
		require.NoError(t, setup.WriteOTLPJSON(&b, tr.Snapshots()))
	}
	path := filepath.Join(t.TempDir(), "trace.json")
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o600))
	return path
}

// explainRun runs retrace explain and requires the exit code want.
func explainRun(t *testing.T, want int, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	require.Equal(t, want, run(append([]string{"explain"}, args...), &out, &errb), "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	return out.String(), errb.String()
}

func rootLayer(layer string, calls int64) []attribute.KeyValue {
	return []attribute.KeyValue{telemetry.Layer.String(layer), telemetry.Outcome.String("success"), telemetry.Calls.Int64(calls)}
}

func breakerSpan() []attribute.KeyValue {
	return []attribute.KeyValue{telemetry.Policy.String(telemetry.PolicyCircuitBreaker), telemetry.Layer.String("tool"),
		telemetry.CircuitState.String(telemetry.CircuitClosed)}
}

// A span that is its own parent, or a cycle of two, ends: alone, with an
// error (there is no root to read the trace from); beside a root, drawn
// from the cycle's earliest span under a heading of its own.
func TestExplainParentCycles(t *testing.T) {
	t.Run("self alone", func(t *testing.T) {
		file := otlpFile(t, traceOf(1, fake{id: 1, parent: 1, name: "self", attrs: breakerSpan()}))
		_, stderr := explainRun(t, 1, "-otlp-file", file)
		assert.Contains(t, stderr, "has no root, no span without a parent: every span lies in or beneath a parent cycle")
		assert.Contains(t, stderr, `span 0000000000000001 "self": its own parent`)
		_, stderr = explainRun(t, 1, "-otlp-file", file, "-json")
		assert.Contains(t, stderr, "has no root", "-json too")
	})
	t.Run("two alone", func(t *testing.T) {
		file := otlpFile(t, traceOf(1, fake{id: 1, parent: 2, name: "a", attrs: breakerSpan()}, fake{id: 2, parent: 1, name: "b"}))
		_, stderr := explainRun(t, 1, "-otlp-file", file)
		assert.Contains(t, stderr, "has no root")
		assert.Contains(t, stderr, `span 0000000000000001 "a": its parent 0000000000000002 closes a cycle of 2 spans`)
	})
	t.Run("beside a root", func(t *testing.T) {
		file := otlpFile(t, traceOf(1,
			fake{id: 1, name: "runtime", attrs: rootLayer("runtime", 1)},
			fake{id: 2, parent: 2, name: "self", attrs: breakerSpan()},
			fake{id: 3, parent: 4, name: "a", attrs: breakerSpan()},
			fake{id: 4, parent: 3, name: "b", attrs: breakerSpan()},
			fake{id: 5, parent: 4, name: "beneath b"},
		))
		stdout, _ := explainRun(t, 0, "-otlp-file", file)
		assert.Contains(t, stdout, "\nparent cycles: 2 cycles of 3 spans, each drawn from its earliest span, whose parent link is ignored\n"+
			"self  ")
		assert.Contains(t, stdout, "⚠ its own parent\n")
		assert.Contains(t, stdout, "⚠ its parent 0000000000000004 closes a cycle of 2 spans\n└─ b  ")
		assert.Contains(t, stdout, "   └─ beneath b  ", "the spans beneath a cycle are drawn with it")
		assert.Contains(t, stdout, "  links       2 parent cycles of 3 spans, each cut at its earliest span\n")
		a := explainJSON(t, "-otlp-file", file)
		assert.Equal(t, Links{Spans: 5, Cycles: 2, CycleSpans: 3, Depth: 2}, a.Links)
		assert.Equal(t, "runtime", a.Root)
	})
}

// A span ID that two spans have: the first is kept, the other left out and
// counted, and nothing recurses.
func TestExplainDuplicateSpanID(t *testing.T) {
	file := otlpFile(t, traceOf(1,
		fake{id: 1, name: "runtime", attrs: rootLayer("runtime", 1)},
		fake{id: 1, parent: 1, name: "twin", attrs: []attribute.KeyValue{telemetry.Attempt.Int(1)}},
		fake{id: 2, parent: 1, name: "runtime attempt", attrs: []attribute.KeyValue{telemetry.Attempt.Int(1)}},
	))
	stdout, _ := explainRun(t, 0, "-otlp-file", file)
	assert.Contains(t, stdout, "trace ab000000000000000000000000000001\nruntime  ")
	assert.Contains(t, stdout, "\n└─ runtime attempt  ")
	assert.NotContains(t, stdout, "twin")
	assert.Contains(t, stdout, "  links       1 span left out, an earlier span having its span ID\n")
	a := explainJSON(t, "-otlp-file", file)
	assert.Equal(t, Links{Spans: 2, Duplicates: 1, Depth: 1}, a.Links)
	assert.Equal(t, 1, a.LeafSpans)
}

// Spans whose parent is not in the trace are drawn as orphans under one
// heading, not as more trees of the trace; a failed span that carries no
// class is counted as unclassified, never as a blank entry.
func TestExplainOrphans(t *testing.T) {
	file := otlpFile(t, traceOf(1,
		fake{id: 1, name: "runtime", attrs: rootLayer("runtime", 1)},
		fake{id: 2, parent: 1, name: "runtime attempt", attrs: []attribute.KeyValue{telemetry.Attempt.Int(1)}},
		fake{id: 3, parent: 0xff, name: "model", attrs: []attribute.KeyValue{telemetry.Layer.String("model")}, failed: "boom"},
		fake{id: 4, parent: 0xfe, name: "tool", attrs: []attribute.KeyValue{telemetry.Layer.String("tool")}},
	))
	stdout, _ := explainRun(t, 0, "-otlp-file", file)
	assert.Equal(t, 1, strings.Count(stdout, "trace ab"), "one trace, one heading:\n%s", stdout)
	assert.Contains(t, stdout, "\n\norphans: 2 spans whose parent is not in the trace, each with the spans beneath it\n"+
		"model  1s  ✗: boom  ⚠ parent 00000000000000ff not in the trace\n"+
		"tool  1s  ⚠ parent 00000000000000fe not in the trace\n")
	assert.Contains(t, stdout, "  errors      1 × unclassified\n")
	assert.NotContains(t, stdout, "×  ")
	assert.Contains(t, stdout, "  links       2 orphans (parent not in the trace), each a tree of its own\n")
	a := explainJSON(t, "-otlp-file", file)
	assert.Equal(t, []ErrorCount{{Class: unclassified, Count: 1}}, a.Errors)
	assert.Equal(t, 2, a.Links.Orphans)
	assert.False(t, a.Links.FromOrphan)

	// A trace read before its root arrived is read from its first orphan.
	file = otlpFile(t, traceOf(1,
		fake{id: 2, parent: 1, name: "runtime attempt", attrs: []attribute.KeyValue{telemetry.Attempt.Int(1)}},
		fake{id: 3, parent: 2, name: "model", attrs: []attribute.KeyValue{telemetry.Layer.String("model")}},
	))
	stdout, _ = explainRun(t, 0, "-otlp-file", file)
	assert.Contains(t, stdout, "\n\norphans: 1 span whose parent is not in the trace, each with the spans beneath it\n"+
		"runtime attempt  1s  attempt=1  ⚠ parent 0000000000000001 not in the trace\n└─ model  1s\n")
	assert.Contains(t, stdout, "explain ab000000000000000000000000000001 (runtime attempt, 1s)\n")
	assert.Contains(t, stdout, "  links       no root: read from the first orphan; 1 orphan (parent not in the trace), each a tree of its own\n")
}

// A chain deeper than the tree indents: every row stays short, so the
// output grows with the spans, not with the square of the depth, and the
// output says where it stopped indenting.
func TestExplainDeepChainIsLinear(t *testing.T) {
	const depth = 3000
	spans := []fake{{id: 1, name: "root", attrs: rootLayer("runtime", 1)}}
	for i := uint64(2); i <= depth; i++ {
		spans = append(spans, fake{id: i, parent: i - 1, name: fmt.Sprint("span", i)})
	}
	stdout, _ := explainRun(t, 0, "-otlp-file", otlpFile(t, traceOf(1, spans...)))
	lines := strings.Split(stdout, "\n")
	// A row: the indentation (at most maxDrawnDepth+1 levels of "│  ",
	// 5 bytes each), a depth mark and the span's own text.
	bound := (maxDrawnDepth+1)*5 + len("┆ [depth 3000] ") + 100
	for i, l := range lines {
		require.LessOrEqual(t, len(l), bound, "line %d", i+1)
	}
	assert.Equal(t, strings.Repeat("   ", maxDrawnDepth-1)+"└─ span33  1s", lines[maxDrawnDepth+1], "the last level indented")
	assert.Equal(t, strings.Repeat("   ", maxDrawnDepth)+"┆ [depth 33] span34  1s", lines[maxDrawnDepth+2], "the first drawn flat, marked")
	assert.Equal(t, strings.Repeat("   ", maxDrawnDepth)+"┆ [depth 2999] span3000  1s", lines[depth])
	assert.Contains(t, stdout, "\nnote: 2967 spans lie deeper than 32 levels, the deepest 2999 levels down: they are drawn at level 33, each marked [depth N]\n")
}

// Beyond the indented levels, the lines of the levels above still run on
// past their deep descendants to the siblings beneath.
func TestTreeDrawsSiblingsBeyondTheIndentedDepth(t *testing.T) {
	spans := []fake{{id: 1, name: "root"}}
	for i := uint64(2); i <= maxDrawnDepth+3; i++ {
		spans = append(spans, fake{id: i, parent: i - 1, name: fmt.Sprint("d", i-1)})
	}
	spans = append(spans, fake{id: 100, parent: 1, name: "sibling"})
	var b bytes.Buffer
	require.NoError(t, newForest(traceOf(1, spans...).Snapshots()).write(&b))
	lines := strings.Split(b.String(), "\n")
	assert.True(t, strings.HasPrefix(lines[2], "├─ d1  "), lines[2])
	assert.Equal(t, "│  "+strings.Repeat("   ", maxDrawnDepth-2)+"└─ d32  1s", lines[maxDrawnDepth+1])
	assert.Equal(t, "│  "+strings.Repeat("   ", maxDrawnDepth-1)+"┆ [depth 33] d33  1s", lines[maxDrawnDepth+2])
	assert.Equal(t, "│  "+strings.Repeat("   ", maxDrawnDepth-1)+"┆ [depth 34] d34  1s", lines[maxDrawnDepth+3])
	assert.True(t, strings.HasPrefix(lines[maxDrawnDepth+4], "└─ sibling  "), lines[maxDrawnDepth+4])
}

// Whatever the parent links, every span kept is reached from a top once,
// so each walk of the forest is linear and ends.
func TestForestReachesEverySpanOnce(t *testing.T) {
	shapes := map[string][]fake{
		"self":        {{id: 1, parent: 1}},
		"two":         {{id: 1, parent: 2}, {id: 2, parent: 1}},
		"ring of 5":   {{id: 1, parent: 5}, {id: 2, parent: 1}, {id: 3, parent: 2}, {id: 4, parent: 3}, {id: 5, parent: 4}},
		"tail":        {{id: 9, parent: 3}, {id: 1, parent: 2}, {id: 2, parent: 1}, {id: 3, parent: 2}},
		"duplicate":   {{id: 1}, {id: 1, parent: 1}, {id: 2, parent: 1}, {id: 2, parent: 2}},
		"no span IDs": {{id: 0}, {id: 0}, {id: 0, parent: 7}},
		"mixed":       {{id: 1}, {id: 2, parent: 1}, {id: 3, parent: 3}, {id: 4, parent: 99}, {id: 5, parent: 6}, {id: 6, parent: 5}},
	}
	for name, spans := range shapes {
		t.Run(name, func(t *testing.T) {
			f := newForest(traceOf(1, spans...).Snapshots())
			seen := map[*node]int{}
			stack := append([]*node(nil), f.tops...)
			for len(stack) > 0 {
				n := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				seen[n]++
				require.Equal(t, 1, seen[n], "a span reached twice")
				stack = append(stack, n.kids...)
			}
			assert.Len(t, seen, len(f.all))
			assert.Equal(t, len(spans), len(f.all)+f.duplicates)
			for _, n := range f.all {
				steps := 0
				for p := n; p.up != nil; p = p.up {
					steps++
					require.Less(t, steps, len(f.all), "the parents of a span lead to a top")
				}
			}
		})
	}
}

// A span refused by a policy called nothing: it is neither a leaf call nor
// a leaf span, and it is named by the policy that refused it, not by the
// span around it.
func TestExplainRefusals(t *testing.T) {
	refusedBy := func(policy string) []attribute.KeyValue {
		return []attribute.KeyValue{telemetry.Policy.String(policy), telemetry.Layer.String("model"),
			telemetry.CircuitState.String(telemetry.CircuitOpen), telemetry.ErrorClass.String("transient"), semconv.ErrorType.String("circuit_open")}
	}
	failed := func(typ string, kvs ...attribute.KeyValue) []attribute.KeyValue {
		return append(kvs, telemetry.ErrorClass.String("transient"), semconv.ErrorType.String(typ))
	}
	file := otlpFile(t, traceOf(1,
		// The fleet's refused call, as retrace writes it.
		fake{id: 1, name: "model", failed: "provider: circuit breaker open", attrs: failed("circuit_open",
			telemetry.Layer.String("model"), telemetry.Outcome.String("rejected"), telemetry.MaxAttempts.Int(3), telemetry.Attempts.Int(1),
			telemetry.Calls.Int(0), telemetry.CallsWorstCase.Int(3))},
		fake{id: 2, parent: 1, name: "model attempt", failed: "provider: circuit breaker open", attrs: failed("circuit_open", telemetry.Attempt.Int(1))},
		fake{id: 3, parent: 2, name: "circuit_breaker", failed: "provider: circuit breaker open", attrs: refusedBy(telemetry.PolicyCircuitBreaker)},
		// A tool's call a full bulkhead refused, with no policy span.
		fake{id: 4, parent: 1, name: "execute_tool search_docs", attrs: []attribute.KeyValue{telemetry.Layer.String("tool"), semconv.GenAIToolName.String("search_docs")}},
		fake{id: 5, parent: 4, name: "tool attempt", failed: "bulkhead full", attrs: failed("bulkhead_full", telemetry.Attempt.Int(1))},
		fake{id: 6, parent: 4, name: "tool attempt", failed: "bulkhead full", attrs: failed("bulkhead_full", telemetry.Attempt.Int(2))},
	))
	a := explainJSON(t, "-otlp-file", file)
	assert.Equal(t, 0, a.LeafSpans, "no call reached a downstream")
	assert.Empty(t, a.Errors, "a refusal is not a failed call")
	assert.Equal(t, []Refusal{
		{Policy: "circuit_breaker", Layer: "model", Type: "circuit_open", Count: 1},
		{Policy: "bulkhead", Layer: "tool", Tool: "search_docs", Type: "bulkhead_full", Count: 2},
	}, a.Refused)
	assert.Equal(t, []Breaker{{Name: "layer model", Layer: "model", Rejected: 1}}, a.Breakers)

	stdout, _ := explainRun(t, 0, "-otlp-file", file)
	assert.Contains(t, stdout, "  calls       0 leaf calls in the trace (0 leaf spans; 3 calls refused, calling nothing); at worst the layers could make 3\n")
	assert.Contains(t, stdout, "  refused     1 call by the circuit_breaker of layer model (circuit_open)\n"+
		"  refused     2 calls by the bulkhead of tool search_docs (bulkhead_full)\n")
	assert.Contains(t, stdout, "  breaker     layer model: refused 1, probed 0\n")
}

// The outermost layer span of a retrying layer whose limit equals its worst
// case states the limit only as retrace.calls.worst_case: explain reads it
// as retrying all the same, and an SDK's resends beneath it are advised on.
// Without retrace.attempts the same span is no retrying layer, and nothing is.
func TestExplainReadsTheOutermostLimitFromTheWorstCase(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layer  []attribute.KeyValue
		advice bool
	}{
		{"retrying", []attribute.KeyValue{telemetry.Layer.String("session"), telemetry.Outcome.String("success"),
			telemetry.Attempts.Int(1), telemetry.Calls.Int(1), telemetry.CallsWorstCase.Int(4)}, true},
		{"not retrying", []attribute.KeyValue{telemetry.Layer.String("session"), telemetry.Outcome.String("success"),
			telemetry.Calls.Int(1), telemetry.CallsWorstCase.Int(4)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := otlpFile(t, traceOf(1,
				fake{id: 1, name: "session", attrs: tc.layer},
				fake{id: 2, parent: 1, name: "session attempt", attrs: []attribute.KeyValue{telemetry.Attempt.Int(1)}},
				fake{id: 3, parent: 2, name: "POST", attrs: []attribute.KeyValue{semconv.HTTPResendCount.Int(2)}},
			))
			var kinds []string
			for _, ad := range explainJSON(t, "-otlp-file", file).Advice {
				kinds = append(kinds, ad.Kind)
			}
			if tc.advice {
				assert.Contains(t, kinds, "sdk_retries")
			} else {
				assert.NotContains(t, kinds, "sdk_retries")
			}
		})
	}
}

// Names and messages are untrusted text: no control character or
// bidirectional override reaches the terminal, and each span stays one row.
func TestExplainPrintsNoControlCharacters(t *testing.T) {
	evil := "evil\x1b[2J\nrow\r\u202egnp.exe"
	file := otlpFile(t, traceOf(1,
		fake{id: 1, name: evil, attrs: append(rootLayer("runtime", 1), telemetry.Diagnosis.String("failed\n\x07 twice"))},
		fake{id: 2, parent: 1, name: "child", failed: "bad\x1b]0;title\x07", attrs: []attribute.KeyValue{telemetry.Attempt.Int(1)}},
	))
	stdout, _ := explainRun(t, 0, "-otlp-file", file)
	assert.NotContains(t, stdout, "\x1b")
	assert.NotContains(t, stdout, "\u202e")
	assert.NotContains(t, stdout, "\r")
	assert.NotContains(t, stdout, "\x07")
	assert.Contains(t, stdout, "\nevil\\x1b[2J\\x0arow\\x0d\\u202egnp.exe  1s  outcome=success  calls=1\n│ failed\\x0a\\x07 twice\n└─ child  ")
	assert.Contains(t, stdout, "✗: bad\\x1b]0;title\\x07\n")
}

// The leaves retrace.calls does not count (a call that reached nothing, a
// session's handshake) are counted apart, by why, and are no failed call.
func TestExplainUncounted(t *testing.T) {
	file := otlpFile(t, traceOf(1,
		fake{id: 1, name: "task", attrs: append(rootLayer("task", 1), telemetry.CallsUncounted.Int(3))},
		fake{id: 2, parent: 1, name: "execute_tool echo", attrs: []attribute.KeyValue{telemetry.Layer.String("tool"), telemetry.Outcome.String("success_after_retry")}},
		fake{id: 3, parent: 2, name: "tool attempt", failed: "the MCP session has ended", attrs: []attribute.KeyValue{telemetry.Attempt.Int(1),
			telemetry.ErrorClass.String("transient"), semconv.ErrorType.String("connection_closed"), telemetry.Uncounted.String(telemetry.UncountedUnsent)}},
		fake{id: 4, parent: 2, name: "tool attempt", attrs: []attribute.KeyValue{telemetry.Attempt.Int(2)}},
		fake{id: 5, parent: 4, name: "initialize", attrs: []attribute.KeyValue{telemetry.Layer.String("mcp"), telemetry.Outcome.String("success"),
			telemetry.Uncounted.String(telemetry.UncountedHandshake)}},
		fake{id: 6, parent: 4, name: "notifications/initialized", attrs: []attribute.KeyValue{telemetry.Layer.String("mcp"), telemetry.Outcome.String("success"),
			telemetry.Uncounted.String(telemetry.UncountedHandshake)}},
		fake{id: 7, parent: 4, name: "tools/call echo", attrs: []attribute.KeyValue{telemetry.Layer.String("mcp"), telemetry.Outcome.String("success")}},
	))
	a := explainJSON(t, "-otlp-file", file)
	assert.Equal(t, int64(1), a.Calls)
	assert.Equal(t, 1, a.LeafSpans, "the one request the server received")
	assert.Equal(t, map[string]int{"unsent": 1, "handshake": 2}, a.Uncounted)
	assert.Empty(t, a.Errors, "an unsent call is no failed call of the downstream")
	stdout, _ := explainRun(t, 0, "-otlp-file", file)
	assert.Contains(t, stdout, "  calls       1 leaf call in the trace (1 leaf span; 2 handshake, not counted; 1 unsent, not counted)")
}
