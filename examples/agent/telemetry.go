package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/telemetry/setup"
)

// openTelemetryOut sets up what the demo writes besides its trees: the
// metrics (to the OTLP receiver the environment names; for Prometheus to
// scrape with OTEL_METRICS_EXPORTER=prometheus, the endpoint's URL on
// stderr; with -metrics, a summary after the scenarios) and, with
// -otlp-file, each trace as OTLP JSON.
func (d *demo) openTelemetryOut(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	x, err := setup.ReadMetricsEnv(getenv)
	if err != nil {
		return err
	}
	// The endpoint that takes the traces is often Jaeger, which takes no
	// metrics: they go over OTLP only when asked for by name.
	x.OTLP = x.OTLP && (getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != "" || strings.Contains(getenv("OTEL_METRICS_EXPORTER"), "otlp"))
	var kinds []string
	switch {
	case x.None:
	case x.Registered != "":
		kinds = append(kinds, x.Registered) // autoexport's, which takes one name
	default:
		if x.OTLP {
			kinds = append(kinds, "otlp")
		}
		if x.Prometheus != "" {
			kinds = append(kinds, "prometheus")
		}
		if d.opts.metrics {
			kinds = append(kinds, "console")
		}
	}
	if len(kinds) == 0 {
		// Without a receiver, metrics are recorded only for -metrics (and a
		// test's reader).
		kinds = []string{"none"}
	}
	env := func(k string) string {
		if k == "OTEL_METRICS_EXPORTER" {
			return strings.Join(kinds, ",")
		}
		return getenv(k)
	}
	out := d.opts.metricsOut
	if out == nil {
		out = io.Discard
	}
	opts := []setup.Option{setup.WithEnv(env), setup.WithServiceName("retrace-agent"), setup.WithWarnings(stderr), setup.WithConsole(out)}
	if x.Prometheus != "" {
		opts = append(opts, setup.WithPrometheusURL(func(url string) {
			fmt.Fprintf(stderr, "agent: metrics for Prometheus at %s\n", url)
		}))
	}
	if d.opts.metricReader != nil {
		opts = append(opts, setup.WithMetricReader(d.opts.metricReader))
	}
	d.mp, d.mshutdown, err = setup.NewMeterProvider(ctx, opts...)
	if err != nil {
		return err
	}
	if d.opts.otlpFile != "" {
		f, err := os.Create(d.opts.otlpFile)
		if err != nil {
			_ = d.mshutdown(context.Background())
			return fmt.Errorf("-otlp-file: %w", err)
		}
		d.otlpFile = f
	}
	return nil
}

// closeMetrics flushes the metrics, printing the -metrics summary; a second
// call does nothing. A receiver that cannot be reached has been warned
// about by setup; the scenarios' results stand.
func (d *demo) closeMetrics() error {
	if d.mshutdown == nil {
		return nil
	}
	if d.opts.metrics && d.opts.metricsOut != nil {
		fmt.Fprintln(d.opts.metricsOut)
	}
	err := d.mshutdown(context.Background())
	d.mshutdown = nil
	return err
}

// writeTraces appends a scenario's traces to the -otlp-file, one line of
// OTLP JSON each: its TraceID's and, for a scenario of many calls, each
// call's. A scenario that leaves none there says why on stderr, so that an
// empty file is never a mystery.
func (d *demo) writeTraces(res result, stderr io.Writer) error {
	if d.otlpFile == nil {
		return nil
	}
	ids := res.traces
	if res.TraceID != "" {
		id, err := trace.TraceIDFromHex(res.TraceID)
		if err != nil {
			return err
		}
		ids = append([]trace.TraceID{id}, ids...)
	}
	if len(ids) == 0 && res.untraced != "" {
		fmt.Fprintf(stderr, "%s: no trace in -otlp-file %s: %s\n", res.Scenario, d.opts.otlpFile, res.untraced)
	}
	for _, id := range ids {
		if err := setup.WriteOTLPJSON(d.otlpFile, d.spans.trace(id)); err != nil {
			return fmt.Errorf("-otlp-file: %w", err)
		}
	}
	return nil
}
