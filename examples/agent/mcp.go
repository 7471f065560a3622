package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/retrace-go/retrace/telemetry/setup"
)

// mcpSide is one run of the examples/mcp command, as its JSON says.
type mcpSide struct {
	ServerRequests int    `json:"server_requests"` // tools/call search_docs the MCP server received
	ModelRequests  int    `json:"model_requests"`
	CacheCalls     int    `json:"cache_calls"`
	ModelTurns     int    `json:"model_turns"`
	ToolCalls      int    `json:"tool_calls"`
	RetriesUsed    int    `json:"retries_used"`
	LeafSpans      int    `json:"leaf_spans"`
	Calls          int64  `json:"calls"`
	WorstCase      int64  `json:"worst_case"`
	Outcome        string `json:"outcome"`
	Answer         string `json:"answer,omitempty"`
	TraceID        string `json:"trace_id"`
	ServerSpans    int    `json:"server_spans"`   // the MCP server's spans in the run's trace
	ServerParents  int    `json:"server_parents"` // of them, the children of the client's spans
}

// mcp is the incident with search_docs an MCP tool in a process of its own,
// answering 429: the examples/mcp command runs it (the MCP SDK is a
// dependency of that module, not of this one), naive and under retrace,
// with its own OTLP export from the same OTEL_* environment, and hands
// back its spans and its server's, which join this process's store: the
// tree, the counts and -otlp-file see both processes.
func (d *demo) mcp(ctx context.Context) (result, error) {
	start := time.Now()
	dir, err := moduleDir("examples/mcp")
	if err != nil {
		return result{}, err
	}
	tmp, err := os.MkdirTemp("", "retrace-mcp-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(tmp)
	spansFile := filepath.Join(tmp, "spans.jsonl")
	cmd := exec.CommandContext(ctx, "go", "run", "-C", dir, ".", "-json", "-spans", spansFile,
		"-time-scale", fmt.Sprint(d.opts.timeScale), "-model", d.opts.model)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("examples/mcp: %w: %s", err, stderr.Bytes())
	}
	var rep struct {
		Naive    mcpSide `json:"naive"`
		Governed mcpSide `json:"governed"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return result{}, fmt.Errorf("examples/mcp's report is not JSON: %w: %s", err, stdout.Bytes())
	}
	naiveID, err := trace.TraceIDFromHex(rep.Naive.TraceID)
	if err != nil {
		return result{}, fmt.Errorf("examples/mcp's naive run: %w", err)
	}
	governedID, err := trace.TraceIDFromHex(rep.Governed.TraceID)
	if err != nil {
		return result{}, fmt.Errorf("examples/mcp's governed run: %w", err)
	}
	if err := d.importTraces(spansFile, "examples/mcp", naiveID, governedID); err != nil {
		return result{}, err
	}
	out, err := d.fromTrace("mcp", rep.Governed.TraceID, time.Since(start))
	if err != nil {
		return out, err
	}
	// What the governed run's downstreams received: the model's requests,
	// the MCP server's and the Go tool's calls. Each is a leaf of its trace.
	out.ProviderRequests = rep.Governed.ModelRequests + rep.Governed.ServerRequests + rep.Governed.CacheCalls
	out.Diagnosis = fmt.Sprintf("search_docs over MCP, its own process: %d requests naive, %d under retrace; %d of the server's spans in the trace",
		rep.Naive.ServerRequests, rep.Governed.ServerRequests, rep.Governed.ServerSpans)
	out.Details = map[string]any{"naive": rep.Naive, "governed": rep.Governed}
	out.traces = []trace.TraceID{naiveID}
	out.Problems = checkMCP(out, rep.Naive, rep.Governed)
	return out, nil
}

func checkMCP(r result, naive, governed mcpSide) []string {
	p := checkCounts(r)
	if naive.ServerRequests != incidentMaxSteps || naive.Outcome != "step_limit" {
		p = append(p, fmt.Sprintf("want the naive loop to call search_docs %d times until the step limit, got %d (%s)", incidentMaxSteps, naive.ServerRequests, naive.Outcome))
	}
	if naive.LeafSpans != naive.ServerRequests+naive.ModelRequests+naive.CacheCalls || int64(naive.LeafSpans) != naive.Calls {
		p = append(p, fmt.Sprintf("the naive run: requests %d, leaf spans %d and retrace.calls %d differ",
			naive.ServerRequests+naive.ModelRequests+naive.CacheCalls, naive.LeafSpans, naive.Calls))
	}
	if governed.ServerRequests != 5 {
		p = append(p, fmt.Sprintf("want 5 requests to search_docs before the breaker opens, got %d", governed.ServerRequests))
	}
	if governed.RetriesUsed > incidentBudget {
		p = append(p, fmt.Sprintf("want at most %d retries, got %d", incidentBudget, governed.RetriesUsed))
	}
	if governed.Outcome != "success" || !strings.HasPrefix(governed.Answer, "From search_cache") {
		p = append(p, "want the governed loop to answer from the other tool")
	}
	for _, s := range []mcpSide{naive, governed} {
		if s.ServerParents != s.ServerRequests {
			p = append(p, fmt.Sprintf("want each of the %d MCP requests' server span beneath its client span, got %d", s.ServerRequests, s.ServerParents))
		}
	}
	return p
}

// moduleDir finds the module at path (slash-separated, from the
// repository's root) above the working directory: the demo runs from the
// repository's root, its tests from examples/agent.
func moduleDir(path string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		c := filepath.Join(dir, filepath.FromSlash(path))
		if _, err := os.Stat(filepath.Join(c, "go.mod")); err == nil {
			return c, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("%s is not above %s: run the demo from the repository", path, wd)
		}
	}
}

// importTraces adds the spans of the traces given, every process's, from
// the OTLP JSON file another command (from) wrote to the demo's store.
func (d *demo) importTraces(path, from string, ids ...trace.TraceID) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	rss, err := setup.ReadOTLPJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("%s's spans: %w", from, err)
	}
	var spans []sdktrace.ReadOnlySpan
	for _, rs := range rss {
		res := resource.NewSchemaless(keyValuesOf(rs.GetResource().GetAttributes())...)
		for _, ss := range rs.ScopeSpans {
			scope := instrumentation.Scope{Name: ss.GetScope().GetName(), Version: ss.GetScope().GetVersion()}
			for _, s := range ss.Spans {
				stub, err := stubOf(s, res, scope)
				if err != nil {
					return fmt.Errorf("%s: %w", from, err)
				}
				if slices.Contains(ids, stub.SpanContext.TraceID()) {
					spans = append(spans, stub.Snapshot())
				}
			}
		}
	}
	if len(spans) == 0 {
		return fmt.Errorf("%s wrote no span of its runs", from)
	}
	for _, s := range spans {
		d.spans.OnEnd(s)
	}
	return nil
}

func stubOf(s *tracepb.Span, res *resource.Resource, scope instrumentation.Scope) (tracetest.SpanStub, error) {
	var tid trace.TraceID
	var sid, pid trace.SpanID
	if len(s.TraceId) != len(tid) || len(s.SpanId) != len(sid) {
		return tracetest.SpanStub{}, fmt.Errorf("span %q has no valid IDs", s.Name)
	}
	copy(tid[:], s.TraceId)
	copy(sid[:], s.SpanId)
	stub := tracetest.SpanStub{
		Name:                 s.Name,
		SpanContext:          trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}),
		SpanKind:             trace.SpanKind(s.Kind),
		StartTime:            time.Unix(0, int64(s.StartTimeUnixNano)),
		EndTime:              time.Unix(0, int64(s.EndTimeUnixNano)),
		Attributes:           keyValuesOf(s.Attributes),
		Resource:             res,
		InstrumentationScope: scope,
	}
	if len(s.ParentSpanId) == len(pid) {
		copy(pid[:], s.ParentSpanId)
		stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: pid, TraceFlags: trace.FlagsSampled})
	}
	for _, e := range s.Events {
		stub.Events = append(stub.Events, sdktrace.Event{Name: e.Name, Time: time.Unix(0, int64(e.TimeUnixNano)), Attributes: keyValuesOf(e.Attributes)})
	}
	if st := s.GetStatus(); st != nil {
		switch st.Code {
		case tracepb.Status_STATUS_CODE_ERROR:
			stub.Status = sdktrace.Status{Code: codes.Error, Description: st.Message}
		case tracepb.Status_STATUS_CODE_OK:
			stub.Status = sdktrace.Status{Code: codes.Ok}
		}
	}
	return stub, nil
}

func keyValuesOf(kvs []*commonpb.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		k := attribute.Key(kv.Key)
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out = append(out, k.String(v.StringValue))
		case *commonpb.AnyValue_IntValue:
			out = append(out, k.Int64(v.IntValue))
		case *commonpb.AnyValue_BoolValue:
			out = append(out, k.Bool(v.BoolValue))
		case *commonpb.AnyValue_DoubleValue:
			out = append(out, k.Float64(v.DoubleValue))
		case *commonpb.AnyValue_ArrayValue:
			var ss []string
			for _, x := range v.ArrayValue.GetValues() {
				ss = append(ss, x.GetStringValue())
			}
			out = append(out, k.StringSlice(ss))
		}
	}
	return out
}
