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

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

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
	all, err := setup.ReadOnlySpans(rss)
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	var spans []sdktrace.ReadOnlySpan
	for _, s := range all {
		if slices.Contains(ids, s.SpanContext().TraceID()) {
			spans = append(spans, s)
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
