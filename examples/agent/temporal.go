package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/telemetry"
)

// The temporal scenario: the seed's outage through a Temporal workflow
// whose activity runs one session turn under Temporal's retry policy of 3
// attempts. The examples/temporal command runs it (the Temporal SDK is a
// dependency of that module, not of this one) on the dev server that
// scripts/temporal.sh builds, each fault a workflow of its own, and hands
// back its figures and its spans, which join this process's store.
// Temporal's waits between attempts are real time, so the command starts
// with the demo, and its seconds pass while the other scenarios run.

// temporalFault is one fault's line of examples/temporal's JSON.
type temporalFault struct {
	Fault            string  `json:"fault"`
	ActivityAttempts int     `json:"activity_attempts"`
	ProviderRequests int     `json:"provider_requests"`
	LeafSpans        int     `json:"leaf_spans"`
	Calls            int64   `json:"calls"`
	WorstCase        int64   `json:"worst_case"`
	GapsMs           []int64 `json:"gaps_ms"`
	Next             string  `json:"next"`
	Ending           string  `json:"ending"`
	TraceID          string  `json:"trace_id"`
}

// temporalServerVersion is the Temporal CLI that scripts/temporal.sh builds.
const temporalServerVersion = "v1.5.1"

// temporalRun is examples/temporal running in the background.
type temporalRun struct {
	cmd            *exec.Cmd
	dir            string
	stdout, stderr bytes.Buffer
	err            error // why it could not start, or why it was not run
}

// temporalServer finds the dev server as examples/temporal does:
// RETRACE_TEMPORAL_BIN, else scripts/temporal.sh's cache. Without one the
// scenario is not run, and the command is not even built: the Temporal SDK
// takes minutes to compile the first time.
func temporalServer(getenv func(string) string) (string, error) {
	if p := getenv("RETRACE_TEMPORAL_BIN"); p != "" {
		return p, nil
	}
	cache := getenv("RETRACE_CACHE")
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(dir, "retrace")
	}
	p := filepath.Join(cache, "temporal-"+temporalServerVersion)
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("no Temporal dev server: build it with scripts/temporal.sh build (the Temporal CLI from the Go module proxy, minutes the first time), or set RETRACE_TEMPORAL_BIN")
	}
	return p, nil
}

// startTemporal starts examples/temporal, once.
func (d *demo) startTemporal(ctx context.Context) {
	if d.temporal != nil {
		return
	}
	r := &temporalRun{}
	d.temporal = r
	bin, err := temporalServer(d.getenv)
	if err != nil {
		r.err = err
		return
	}
	dir, err := moduleDir("examples/temporal")
	if err != nil {
		r.err = err
		return
	}
	if r.dir, r.err = os.MkdirTemp("", "retrace-temporal-"); r.err != nil {
		return
	}
	r.cmd = exec.CommandContext(ctx, "go", "run", "-C", dir, ".", "-json", "-spans", filepath.Join(r.dir, "spans.jsonl"))
	r.cmd.Env = append(os.Environ(), "RETRACE_TEMPORAL_BIN="+bin)
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	if r.err = r.cmd.Start(); r.err != nil {
		r.cmd = nil
	}
}

// stopTemporal ends a run the demo did not collect (it stopped early).
func (d *demo) stopTemporal() {
	r := d.temporal
	d.temporal = nil
	if r == nil {
		return
	}
	if r.cmd != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
	if r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
}

// temporalScenario collects examples/temporal's run: the always-503
// workflow's trace is the scenario's, the other faults' traces go to
// -otlp-file beside it, and every fault's requests, leaf spans and
// retrace.calls must agree.
func (d *demo) temporalScenario(ctx context.Context) (result, error) {
	start := time.Now()
	d.startTemporal(ctx)
	r := d.temporal
	d.temporal = nil
	defer func() {
		if r.dir != "" {
			_ = os.RemoveAll(r.dir)
		}
	}()
	if r.err != nil {
		return result{Scenario: "temporal", Skipped: r.err.Error(), untraced: "not run"}, nil
	}
	if err := r.cmd.Wait(); err != nil {
		return result{}, fmt.Errorf("examples/temporal: %w: %s", err, r.stderr.Bytes())
	}
	var rep struct {
		Faults []temporalFault `json:"faults"`
	}
	if err := json.Unmarshal(r.stdout.Bytes(), &rep); err != nil {
		return result{}, fmt.Errorf("examples/temporal's report is not JSON: %w: %s", err, r.stdout.Bytes())
	}
	if len(rep.Faults) == 0 {
		return result{}, errors.New("examples/temporal ran no fault")
	}
	// Every fault's trace, the first the scenario's own.
	var ids []trace.TraceID
	for _, f := range rep.Faults {
		id, err := trace.TraceIDFromHex(f.TraceID)
		if err != nil {
			return result{}, fmt.Errorf("examples/temporal's %s: %w", f.Fault, err)
		}
		ids = append(ids, id)
	}
	first, others := rep.Faults[0], ids[1:]
	if err := d.importTraces(filepath.Join(r.dir, "spans.jsonl"), "examples/temporal", ids...); err != nil {
		return result{}, err
	}
	out, err := d.fromTrace("temporal", first.TraceID, time.Since(start))
	if err != nil {
		return out, err
	}
	// The trace's root is Temporal's, which carries no retrace.calls: the
	// counts are those of the activity attempts' retrace roots, added up,
	// read here off the imported trace, not taken from the command's word.
	// The outcome is the last attempt's.
	out.Calls, out.WorstCase = 0, 0
	var last time.Time
	for _, s := range d.spans.trace(ids[0]) {
		if attrOf(s, telemetry.Layer).AsString() == temporalLayer {
			out.Calls += attrOf(s, telemetry.Calls).AsInt64()
			out.WorstCase = max(out.WorstCase, attrOf(s, telemetry.CallsWorstCase).AsInt64())
			if s.StartTime().After(last) {
				last, out.Outcome = s.StartTime(), attrOf(s, telemetry.Outcome).AsString()
			}
		}
	}
	out.ProviderRequests = first.ProviderRequests
	var lines []string
	for _, f := range rep.Faults {
		lines = append(lines, fmt.Sprintf("%s: %d requests, %s", f.Fault, f.ProviderRequests, f.Ending))
	}
	out.Diagnosis = strings.Join(lines, "; ")
	out.Details = map[string]any{"faults": rep.Faults}
	out.traces = others
	out.Problems = checkTemporal(out, rep.Faults)
	return out, nil
}

// temporalLayer is contrib/temporal's LayerName: each activity attempt's
// retrace root.
const temporalLayer = "temporal"

// temporalWant is what Temporal must do with each of examples/temporal's
// faults: retry a transient one to its 3 attempts, each the session's 4
// requests, and stop a fatal or permanent one after its first request.
var temporalWant = map[string]struct {
	requests int
	next     string
}{
	"always-503":                  {12, "gave up after its attempts: transient"},
	"insufficient-quota":          {1, "stopped: fatal"},
	"invalid-api-key":             {1, "stopped: permanent"},
	"rate-limited-retry-after-2s": {12, "gave up after its attempts: transient"},
}

// checkTemporal: the scenario's trace proves its counts, and every fault's
// requests, leaf spans and retrace.calls agree with what Temporal must do.
func checkTemporal(r result, faults []temporalFault) []string {
	p := checkCounts(r)
	for _, f := range faults {
		want, ok := temporalWant[f.Fault]
		if !ok {
			p = append(p, fmt.Sprintf("examples/temporal ran %s, a fault the demo does not know", f.Fault))
			continue
		}
		if f.ProviderRequests != f.LeafSpans || int64(f.LeafSpans) != f.Calls {
			p = append(p, fmt.Sprintf("%s: requests %d, leaf spans %d and retrace.calls %d differ", f.Fault, f.ProviderRequests, f.LeafSpans, f.Calls))
		}
		if f.ProviderRequests != want.requests || f.Next != want.next {
			p = append(p, fmt.Sprintf("%s: want %d provider requests and %q, got %d and %q", f.Fault, want.requests, want.next, f.ProviderRequests, f.Next))
		}
	}
	if len(faults) != len(temporalWant) {
		p = append(p, fmt.Sprintf("want the %d faults, examples/temporal ran %d", len(temporalWant), len(faults)))
	}
	return p
}

// reportTemporal writes the temporal scenario's faults, a line each.
func reportTemporal(w io.Writer, r result) error {
	faults, _ := r.Details["faults"].([]temporalFault)
	if len(faults) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\ntemporal: one workflow per fault, Temporal's retry policy of 3 attempts around a session of 4")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tactivity attempts\tprovider requests\tleaf spans\tretrace.calls\tworst case\tTemporal, in the end\t")
	for _, f := range faults {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", f.Fault, f.ActivityAttempts, f.ProviderRequests, f.LeafSpans, f.Calls, f.WorstCase, f.Ending)
	}
	return tw.Flush()
}

// temporalTracer is the tracer examples/temporal gives Temporal's tracing
// interceptor: the spans of that scope are Temporal's own (StartWorkflow,
// RunActivity, …), with Temporal's keys.
const temporalTracer = "temporal-sdk-go"
