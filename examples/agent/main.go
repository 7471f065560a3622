// Command agent is retrace's demo: two retry layers, an agent
// runtime's exec around its session, against a local fault-injecting
// OpenAI-compatible server, one scenario per kind of failure. It prints each
// trace as a tree and a summary that checks the trace's own counts: provider
// requests = leaf spans = the root's retrace.calls.
//
//	go run ./examples/agent                        # every scenario
//	go run ./examples/agent -scenario always-503   # one
//	go run ./examples/agent -json                  # one JSON object per scenario
//	go run ./examples/agent -metrics               # and a summary of the metrics
//	go run ./examples/agent -otlp-file traces.json # and the traces, for retrace explain
//	OTEL_METRICS_EXPORTER=prometheus go run ./examples/agent -scenario always-503,incident -repeat
//	                                               # a lasting outage, its metrics at localhost:9464/metrics until stdin closes
//	OTEL_EXPORTER_OTLP_ENDPOINT=localhost:4317 go run ./examples/agent          # and export to Jaeger over OTLP/gRPC
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 go run ./examples/agent   # or over OTLP/HTTP
//	OPENAI_API_KEY=… go run ./examples/agent -base-url https://api.openai.com/v1 -model gpt-4o-mini
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func main() {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(runChild(dir)) // the crash-resume scenario's task process
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		if errors.Is(err, errCheck) {
			os.Exit(1)
		}
		os.Exit(2)
	}
}

var errCheck = errors.New("a scenario did not show what it should")

type options struct {
	scenario  string
	json      bool
	timeScale float64
	baseURL   string
	model     string
	quiet     bool
	metrics   bool   // print the metric summary after the scenarios
	otlpFile  string // write each scenario's trace there, as OTLP JSON
	repeat    bool   // run the scenarios in rounds until stdin closes
	// metricsOut is where -metrics prints; metricReader, if set, reads the
	// metrics too (tests).
	metricsOut   io.Writer
	metricReader sdkmetric.Reader
}

// run runs the demo as its arguments say. stdin matters to -repeat alone,
// which runs until it closes; nil is a stdin that never does.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.scenario, "scenario", "", "run these scenarios, comma-separated: "+strings.Join(names(), ", "))
	fs.BoolVar(&o.json, "json", false, "print one JSON object per scenario instead of trees and a table")
	fs.Float64Var(&o.timeScale, "time-scale", 0.01, "how fast backoffs and cool-downs pass: 0.01 turns 8 s into 80 ms (spans keep the configured delays); 1 is real time")
	fs.StringVar(&o.baseURL, "base-url", "", "an OpenAI-compatible endpoint to run one live prompt against (key in OPENAI_API_KEY)")
	fs.StringVar(&o.model, "model", "gpt-4o-mini", "the model")
	fs.BoolVar(&o.quiet, "quiet", false, "no trees, only the summary")
	fs.BoolVar(&o.metrics, "metrics", false, "print a summary of retrace's metrics after the scenarios")
	fs.StringVar(&o.otlpFile, "otlp-file", "", "write each scenario's trace to `FILE` as OTLP JSON, one line per trace (retrace explain reads it)")
	fs.BoolVar(&o.repeat, "repeat", false, "run the scenarios again and again until stdin closes or an interrupt: a lasting outage, for a Prometheus scraping OTEL_METRICS_EXPORTER=prometheus's endpoint")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.timeScale <= 0 {
		return fmt.Errorf("-time-scale must be above 0, got %v", o.timeScale)
	}
	o.metricsOut = stdout
	d, err := newDemo(ctx, o, getenv, stderr)
	if err != nil {
		return err
	}
	defer d.close()

	if o.baseURL != "" {
		res, err := d.live(ctx, o.baseURL, getenv("OPENAI_API_KEY"))
		if err != nil {
			return err
		}
		if o.json {
			return json.NewEncoder(stdout).Encode(res)
		}
		if !o.quiet {
			if err := d.tree(stdout, res.TraceID); err != nil {
				return err
			}
		}
		return d.report(stdout, []result{res})
	}
	selected, err := selectScenarios(o.scenario)
	if err != nil {
		return err
	}
	var stop <-chan struct{}
	if o.repeat {
		stop = closed(stdin)
	}
	failed := false
	for round := 1; ; round++ {
		results, err := d.round(ctx, selected, stdout, stderr)
		if err != nil {
			return err
		}
		for _, r := range results {
			failed = failed || len(r.Problems) > 0
		}
		if !o.repeat {
			break
		}
		select {
		case <-stop:
			fmt.Fprintf(stderr, "agent: stdin closed after round %d\n", round)
		case <-ctx.Done():
			return ctx.Err()
		default:
			// Each round's spans are read in the round: a lasting run
			// keeps none of them.
			d.spans.reset()
			continue
		}
		break
	}
	_ = d.closeMetrics() // setup has warned of a receiver it could not reach
	if failed {
		return errCheck
	}
	return nil
}

// selectScenarios returns the scenarios a comma-separated list names, in
// the demo's order; every one for "".
func selectScenarios(list string) ([]scenario, error) {
	want := map[string]bool{}
	for n := range strings.SplitSeq(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	all := len(want) == 0
	var selected []scenario
	for _, sc := range scenarios() {
		if all || want[sc.name] {
			selected = append(selected, sc)
			delete(want, sc.name)
		}
	}
	for n := range want {
		return nil, fmt.Errorf("unknown scenario %q; want one of %s", n, strings.Join(names(), ", "))
	}
	return selected, nil
}

// closed returns a channel closed when r reaches its end or fails; one
// that is never closed for a nil r. The goroutine reading r ends with it.
func closed(r io.Reader) <-chan struct{} {
	c := make(chan struct{})
	if r == nil {
		return c
	}
	go func() {
		defer close(c)
		_, _ = io.Copy(io.Discard, r)
	}()
	return c
}

// round runs the scenarios once, printing each as it ends and the summary
// after them.
func (d *demo) round(ctx context.Context, selected []scenario, stdout, stderr io.Writer) ([]result, error) {
	o := d.opts
	for _, sc := range selected {
		if sc.start != nil {
			sc.start(d, ctx)
		}
	}
	var results []result
	for _, sc := range selected {
		res, err := d.scenario(ctx, sc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc.name, err)
		}
		if !o.json && !o.quiet {
			fmt.Fprintf(stdout, "== %s: %s\n", sc.name, sc.about)
			if res.Skipped != "" {
				fmt.Fprintf(stdout, "not run: %s\n", res.Skipped)
			}
			if res.TraceID != "" {
				if err := d.tree(stdout, res.TraceID); err != nil {
					return nil, err
				}
			}
			fmt.Fprintln(stdout)
		}
		if o.json {
			if err := json.NewEncoder(stdout).Encode(res); err != nil {
				return nil, err
			}
		}
		if err := d.writeTraces(res, stderr); err != nil {
			return nil, err
		}
		results = append(results, res)
	}
	return results, d.report(stdout, results)
}

func names() []string {
	var out []string
	for _, sc := range scenarios() {
		out = append(out, sc.name)
	}
	return out
}

// report prints the summary table (unless the output is JSON) and, when
// spans go to a collector, where to find them.
func (d *demo) report(w io.Writer, results []result) error {
	if d.opts.json {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tprovider requests\tleaf spans\tretrace.calls\tcheck\t outcome\t diagnosis\t")
	for _, r := range results {
		check := "✓"
		if len(r.Problems) > 0 {
			check = "✗ " + strings.Join(r.Problems, "; ")
		}
		leaves, calls := fmt.Sprint(r.LeafSpans), fmt.Sprint(r.Calls)
		if r.TraceID == "" && len(r.traces) == 0 {
			leaves, calls = "-", "-" // its spans are in its own processes
		}
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t not run\t %s\t\n", r.Scenario, r.Skipped)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t %s\t %s\t\n", r.Scenario, r.ProviderRequests, leaves, calls, check, r.Outcome, shorten(r.Diagnosis, 90))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		switch r.Scenario {
		case "incident":
			naive, governed := r.Details["naive"].(side), r.Details["governed"].(side)
			fmt.Fprintf(w, "\nincident: search_docs answers 429 for %s; MaxSteps %d; task budget %d retries\n", incidentOutage, incidentMaxSteps, incidentBudget)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "run\tsearch_docs calls\tmodel turns\ttool calls\tretries\toutcome\tanswer\t")
			for _, x := range []struct {
				name string
				s    side
			}{{"naive loop", naive}, {"retrace", governed}} {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", x.name, x.s.DownstreamCalls, x.s.ModelTurns, x.s.ToolCalls, x.s.RetriesUsed, x.s.Outcome, shorten(x.s.Answer, 60))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		case "crash-resume":
			fmt.Fprintf(w, "\ncrash-resume: %s\n", r.Diagnosis)
		case "temporal":
			if err := reportTemporal(w, r); err != nil {
				return err
			}
		}
	}
	if d.exporting {
		fmt.Fprintln(w, "\nexported over OTLP; the traces:")
		for _, r := range results {
			fmt.Fprintf(w, "  %-20s %s\n", r.Scenario, r.TraceID)
		}
	}
	return nil
}

func shorten(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
