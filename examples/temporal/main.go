// Command temporal is the demo's temporal scenario, in a module of its own
// so that the Temporal SDK stays out of the core's: the seed's outage
// through a workflow. A workflow's activity runs one session turn (4
// attempts of its own) under Temporal's retry policy of 3 attempts,
// against a provider that fails each way the demo knows; a worker with
// retrace's interceptor and Temporal's tracing interceptor runs it on a
// Temporal dev server, and the command prints, per fault, what Temporal
// did and what it cost: the provider's requests, the trace's leaf spans
// and retrace.calls, added up over the activity attempts' retrace roots,
// which must agree; then the trace of the first fault.
//
//	go run -C examples/temporal .
//
// It starts the dev server that scripts/temporal.sh build makes (or
// RETRACE_TEMPORAL_BIN), on 127.0.0.1, and stops it; without one it says
// how to get it and exits 2.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/retrace-go/retrace/clock"
	retracetemporal "github.com/retrace-go/retrace/contrib/temporal"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// errNoServer is a missing dev server: the command says how to get one.
var errNoServer = errors.New("no Temporal dev server")

func main() {
	asJSON := flag.Bool("json", false, "print one JSON object: each fault's figures")
	spans := flag.String("spans", "", "write every span of every fault's workflow to `FILE` as OTLP JSON lines")
	flag.Parse()
	rows, err := collect(context.Background())
	if err == nil && *spans != "" {
		err = writeSpans(*spans, rows)
	}
	if err == nil {
		if *asJSON {
			err = json.NewEncoder(os.Stdout).Encode(reportOf(rows))
		} else {
			err = writeTable(os.Stdout, rows)
		}
	}
	switch {
	case errors.Is(err, errNoServer):
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "temporal:", err)
		os.Exit(1)
	}
}

// fault is one row: what the provider answers, every time.
type fault struct {
	name  string
	fault retracetest.Fault
}

var faults = []fault{
	{"always-503", retracetest.ServerError(503)},
	{"insufficient-quota", retracetest.InsufficientQuota()},
	{"invalid-api-key", retracetest.InvalidAPIKey()},
	{"rate-limited-retry-after-2s", retracetest.RateLimited(2 * time.Second)},
}

// row is what one fault cost.
type row struct {
	name           string
	requests, leaf int
	calls          int64
	worstCase      int64 // of one attempt's root: Temporal's attempts × the session's
	attempts       int
	gaps           []time.Duration // from one activity attempt's end to the next's start
	next           string          // how the workflow ended
	trace          []sdktrace.ReadOnlySpan
}

// report is the -json output, which the demo's temporal scenario reads.
type report struct {
	Faults []faultReport `json:"faults"`
}

type faultReport struct {
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

func reportOf(rows []row) report {
	var rep report
	for _, r := range rows {
		fr := faultReport{Fault: r.name, ActivityAttempts: r.attempts, ProviderRequests: r.requests, LeafSpans: r.leaf,
			Calls: r.calls, WorstCase: r.worstCase, Next: r.next, Ending: r.ending(), GapsMs: []int64{}}
		for _, g := range r.gaps {
			fr.GapsMs = append(fr.GapsMs, g.Milliseconds())
		}
		if len(r.trace) > 0 {
			fr.TraceID = r.trace[0].SpanContext().TraceID().String()
		}
		rep.Faults = append(rep.Faults, fr)
	}
	return rep
}

// collect runs every fault's workflow on one dev server, side by side:
// each has a task queue, a worker and a provider of its own, and
// Temporal's waits between attempts are real time, so the run takes as
// long as its slowest fault.
func collect(ctx context.Context) ([]row, error) {
	bin, err := devServer()
	if err != nil {
		return nil, err
	}
	addr, stop, err := startDevServer(ctx, bin)
	if err != nil {
		return nil, err
	}
	defer stop()
	logger := log.NewStructuredLogger(nilLogger())
	c, err := client.Dial(client.Options{HostPort: addr, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("dialing the dev server: %w", err)
	}
	defer c.Close()

	rows := make([]row, len(faults))
	errs := make([]error, len(faults))
	var wg sync.WaitGroup
	for i, f := range faults {
		wg.Go(func() {
			rows[i], errs[i] = runFault(ctx, c, logger, "demo-"+strconv.Itoa(i), f)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", f.name, errs[i])
			}
		})
	}
	wg.Wait()
	return rows, errors.Join(errs...)
}

// writeTable writes the table and the first fault's trace; it fails when a
// fault's requests, leaf spans and retrace.calls disagree.
func writeTable(w io.Writer, rows []row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tactivity attempts\tprovider requests\tleaf spans\tretrace.calls\tcheck\tTemporal, in the end\t")
	failed := false
	for _, r := range rows {
		check := "ok"
		if r.requests != r.leaf || int64(r.requests) != r.calls {
			check, failed = "MISMATCH", true
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", r.name, r.attempts, r.requests, r.leaf, r.calls, check, r.ending())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nthe trace of %s (one workflow, every attempt in it):\n", rows[0].name)
	if err := setup.WriteTree(w, rows[0].trace); err != nil {
		return err
	}
	if failed {
		return errors.New("the requests, the leaf spans and retrace.calls disagree")
	}
	return nil
}

// ending says what Temporal did: how the workflow ended, and the waits it
// made between attempts before that.
func (r row) ending() string {
	if len(r.gaps) == 0 {
		return r.next
	}
	waits := make([]string, len(r.gaps))
	for i, g := range r.gaps {
		waits[i] = fmt.Sprintf("%.1fs", g.Seconds())
	}
	return r.next + ", after waits of " + strings.Join(waits, ", ")
}

// writeSpans writes every fault's spans to path, one OTLP JSON line per
// fault's trace.
func writeSpans(path string, rows []row) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if err := setup.WriteOTLPJSON(f, r.trace); err != nil {
			_ = f.Close()
			return err
		}
	}
	return f.Close()
}

// runFault runs the workflow once against a provider that answers f.
func runFault(ctx context.Context, c client.Client, logger log.Logger, queue string, f fault) (row, error) {
	srv := retracetest.New(retracetest.Always(f.fault))
	if err := srv.Start(); err != nil {
		return row{}, err
	}
	defer srv.Close()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	tracing, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer("temporal-sdk-go")})
	if err != nil {
		return row{}, err
	}
	tc, err := client.NewClientFromExisting(c, client.Options{Interceptors: []interceptor.ClientInterceptor{tracing}, Logger: logger})
	if err != nil {
		return row{}, err
	}
	defer tc.Close()
	opts := []middleware.Option{middleware.WithTracerProvider(tp)}
	var mu sync.Mutex
	attempts := 0
	turn := func(ctx context.Context, prompt string) (string, error) {
		mu.Lock()
		attempts++
		mu.Unlock()
		s, err := session.New(session.Config{
			Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-demo-0123456789abcdef", HTTPClient: &http.Client{Transport: transport}}),
			Model:    "gpt-4o-mini",
			// The session's own waits pass at once; Temporal's are real.
			Retry:   policies.RetryConfig{MaxAttempts: 4, Clock: clock.NewVirtual(time.Now())},
			Options: opts,
		})
		if err != nil {
			return "", err
		}
		msg, err := s.Run(ctx, prompt)
		return msg.Content, err
	}
	// Temporal's tracing interceptor, a client's, runs on its workers too.
	wk := worker.New(tc, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{
		retracetemporal.NewInterceptor(retracetemporal.Config{Options: opts}),
	}})
	wk.RegisterWorkflow(agentWorkflow)
	wk.RegisterActivityWithOptions(turn, activity.RegisterOptions{Name: "Turn"})
	if err := wk.Start(); err != nil {
		return row{}, err
	}
	defer wk.Stop()

	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	we, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue}, agentWorkflow, "Summarise the incident")
	if err != nil {
		return row{}, err
	}
	next := "completed"
	if err := we.Get(ctx, nil); err != nil {
		var app *temporal.ApplicationError
		switch {
		case errors.As(err, &app) && app.NonRetryable():
			next = "stopped: " + app.Type()
		case errors.As(err, &app):
			next = "gave up after its attempts: " + app.Type()
		default:
			next = "failed: " + err.Error()
		}
	}
	spans := rec.Ended()
	r := row{name: f.name, requests: srv.Requests(), attempts: attempts, next: next, trace: spans}
	// Each activity attempt is a retrace root of layer temporal: the
	// fault's counts are theirs added up, and Temporal's waits are the
	// gaps between them.
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == "retrace.layer" && kv.Value.AsString() == retracetemporal.LayerName {
				roots = append(roots, s)
			}
		}
	}
	slices.SortFunc(roots, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	for i, s := range roots {
		counts, err := retracetest.TraceCounts(retracetest.Subtree(spans, s))
		if err != nil {
			return row{}, err
		}
		r.leaf += counts.LeafSpans
		r.calls += counts.Calls
		r.worstCase = max(r.worstCase, counts.WorstCase)
		if i > 0 {
			r.gaps = append(r.gaps, s.StartTime().Sub(roots[i-1].EndTime()))
		}
	}
	return r, nil
}

// agentWorkflow runs the turn under Temporal's retry policy of 3 attempts.
func agentWorkflow(ctx workflow.Context, prompt string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: 3},
	})
	var out string
	err := workflow.ExecuteActivity(ctx, "Turn", prompt).Get(ctx, &out)
	return out, err
}

// devServer finds the Temporal CLI: RETRACE_TEMPORAL_BIN, or the one
// scripts/temporal.sh keeps in the cache.
func devServer() (string, error) {
	if p := os.Getenv("RETRACE_TEMPORAL_BIN"); p != "" {
		return p, nil
	}
	cache := os.Getenv("RETRACE_CACHE")
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(dir, "retrace")
	}
	p := filepath.Join(cache, "temporal-v1.5.1")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: build it with scripts/temporal.sh build (the Temporal CLI from the Go module proxy, minutes the first time), or set RETRACE_TEMPORAL_BIN", errNoServer)
	}
	return p, nil
}

// startDevServer starts the dev server on 127.0.0.1, in memory, and returns
// its address and how to stop it.
func startDevServer(ctx context.Context, bin string) (string, func(), error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	args := []string{"server", "start-dev", "--headless", "--ip", "127.0.0.1", "--log-level", "error", "--port", strconv.Itoa(port)}
	for _, flag := range []string{"--http-port", "--metrics-port"} {
		p, err := freePort()
		if err != nil {
			return "", nil, err
		}
		args = append(args, flag, strconv.Itoa(p))
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	if err := awaitLine(out, "Server:", 2*time.Minute); err != nil {
		stop()
		return "", nil, fmt.Errorf("the dev server did not start: %w (%s)", err, stderr.String())
	}
	return "127.0.0.1:" + strconv.Itoa(port), stop, nil
}
