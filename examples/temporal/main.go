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
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
	err := run(context.Background(), os.Stdout)
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
	attempts       int
	next           string // what Temporal did in the end
	trace          []sdktrace.ReadOnlySpan
}

func run(ctx context.Context, w io.Writer) error {
	bin, err := devServer()
	if err != nil {
		return err
	}
	addr, stop, err := startDevServer(ctx, bin)
	if err != nil {
		return err
	}
	defer stop()
	logger := log.NewStructuredLogger(nilLogger())
	c, err := client.Dial(client.Options{HostPort: addr, Logger: logger})
	if err != nil {
		return fmt.Errorf("dialing the dev server: %w", err)
	}
	defer c.Close()

	var rows []row
	for i, f := range faults {
		r, err := runFault(ctx, c, logger, "demo-"+strconv.Itoa(i), f)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		rows = append(rows, r)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tactivity attempts\tprovider requests\tleaf spans\tretrace.calls\tcheck\tTemporal, in the end\t")
	failed := false
	for _, r := range rows {
		check := "ok"
		if r.requests != r.leaf || int64(r.requests) != r.calls {
			check, failed = "MISMATCH", true
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", r.name, r.attempts, r.requests, r.leaf, r.calls, check, r.next)
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
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == "retrace.layer" && kv.Value.AsString() == retracetemporal.LayerName {
				counts, err := retracetest.TraceCounts(retracetest.Subtree(spans, s))
				if err != nil {
					return row{}, err
				}
				r.leaf += counts.LeafSpans
				r.calls += counts.Calls
			}
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
