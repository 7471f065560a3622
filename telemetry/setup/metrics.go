package setup

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// WithMetricReader adds a metric reader beside the exporter's (a manual
// reader in tests, an exporter of the program's own).
func WithMetricReader(r sdkmetric.Reader) Option {
	return optionFunc(func(c *config) { c.readers = append(c.readers, r) })
}

// WithPrometheusURL has report called once, before [NewMeterProvider]
// returns, with the URL Prometheus scrapes when OTEL_METRICS_EXPORTER names
// prometheus: http://host:port/metrics, the port the one bound, which
// OTEL_EXPORTER_PROMETHEUS_PORT=0 leaves to the system.
func WithPrometheusURL(report func(url string)) Option {
	return optionFunc(func(c *config) { c.prometheusURL = report })
}

// Metrics builds a meter provider from the OTEL_* variables (see
// [NewMeterProvider]) and installs it as the global provider: it is meant
// for main, not for libraries. shutdown flushes the metrics (or prints the
// console summary) and returns within 5 s.
func Metrics(ctx context.Context, opts ...Option) (shutdown func(context.Context) error, err error) {
	mp, shutdown, err := NewMeterProvider(ctx, opts...)
	if err != nil {
		return nil, err
	}
	otel.SetMeterProvider(mp)
	return shutdown, nil
}

// ReadMetricsEnv reads what the OTEL_* variables ask of metrics, as
// [ReadEnv] reads them for tracing: OTEL_METRICS_EXPORTER (a
// comma-separated list of otlp, console for a summary printed at shutdown,
// prometheus for a scrape endpoint, and none, which wins; or, alone, a name
// registered with autoexport), OTEL_EXPORTER_OTLP_(METRICS_)PROTOCOL,
// _ENDPOINT (the signal's path is /v1/metrics) and _INSECURE, and, for
// prometheus, OTEL_EXPORTER_PROMETHEUS_HOST and _PORT.
func ReadMetricsEnv(getenv func(string) string) (Exporters, error) { return readEnv(getenv, "METRICS") }

// NewMeterProvider builds a meter provider from the OTEL_* variables (see
// [ReadMetricsEnv]) without touching the globals, and returns it with its
// bounded shutdown. OTLP exports every OTEL_METRIC_EXPORT_INTERVAL (60 s by
// default) and once more at shutdown; the console form prints a short
// summary of every metric at shutdown, to the console writer
// ([WithConsole]); prometheus serves the metrics for scraping at
// http://OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT/metrics
// (localhost:9464) from the moment it returns until shutdown, which stops
// the server and waits for its goroutine ([WithPrometheusURL] tells where,
// port 0 choosing any free one). The endpoint speaks OpenMetrics to a
// scraper that asks for it, so that histogram buckets and counters carry
// exemplars: the trace and span IDs of a measurement made inside a
// sampled span, as the SDK's default exemplar filter (trace_based,
// OTEL_METRICS_EXEMPLAR_FILTER) keeps them. With OTEL_METRICS_EXPORTER=none
// and no reader of its own it returns a no-op provider.
func NewMeterProvider(ctx context.Context, opts ...Option) (metric.MeterProvider, func(context.Context) error, error) {
	c := newConfig(opts)
	x, err := ReadMetricsEnv(c.getenv)
	if err != nil {
		return nil, nil, err
	}
	if x.None && len(c.readers) == 0 {
		return noop.NewMeterProvider(), func(context.Context) error { return nil }, nil
	}
	headers, err := readHeaders(c.getenv, "METRICS")
	if err != nil {
		return nil, nil, err
	}
	res, err := newResource(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	mpOpts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	// The Prometheus endpoint first: binding its port is what fails most
	// often, and when it fails it has started nothing. Once it serves, a
	// later failure stops it.
	var prom *prometheusReader
	var promURL string
	if x.Prometheus != "" {
		if prom, promURL, err = newPrometheusReader(x.Prometheus); err != nil {
			return nil, nil, err
		}
		mpOpts = append(mpOpts, sdkmetric.WithReader(prom))
	}
	exporting := x.OTLP || x.Registered != ""
	if exporting {
		r, rerr := newMetricReader(ctx, x, c, headers)
		if rerr != nil {
			if prom != nil {
				_ = prom.Shutdown(ctx)
			}
			return nil, nil, rerr
		}
		mpOpts = append(mpOpts, sdkmetric.WithReader(r))
	}
	if prom != nil && c.prometheusURL != nil {
		c.prometheusURL(promURL)
	}
	var summary *sdkmetric.ManualReader
	if x.Console {
		summary = sdkmetric.NewManualReader()
		mpOpts = append(mpOpts, sdkmetric.WithReader(summary))
	}
	for _, r := range c.readers {
		mpOpts = append(mpOpts, sdkmetric.WithReader(r))
	}
	mp := sdkmetric.NewMeterProvider(mpOpts...)

	shutdown := c.boundedOnce(func(sctx context.Context) (err error) {
		if summary != nil {
			var rm metricdata.ResourceMetrics
			if err = summary.Collect(sctx, &rm); err == nil {
				err = WriteSummary(c.console, &rm)
			}
		}
		if serr := mp.Shutdown(sctx); serr != nil && err == nil {
			err = serr
			if exporting {
				fmt.Fprintf(c.warnings, "retrace: could not flush metrics to %s within %s; they were dropped (%s%s)\n",
					x.where(), c.shutdownTimeout, safeErr(serr, headers), x.hint())
			}
		}
		return err
	})
	return mp, shutdown, nil
}

// WriteSummary writes what rm holds as a short text, one line per data
// point under each metric's name and unit, metrics by name and points by
// their attributes: a counter's or gauge's value, a histogram's count, sum,
// mean and largest value. retrace.* attribute keys lose their prefix.
func WriteSummary(w io.Writer, rm *metricdata.ResourceMetrics) error {
	var ms []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		ms = append(ms, sm.Metrics...)
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	var b strings.Builder
	b.WriteString("metrics\n")
	for _, m := range ms {
		rows := summaryRows(m.Data)
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %s (%s)\n", m.Name, m.Unit)
		sort.Slice(rows, func(i, j int) bool { return rows[i][0] < rows[j][0] })
		width := 0
		for _, r := range rows {
			width = max(width, len(r[0]))
		}
		for _, r := range rows {
			fmt.Fprintf(&b, "    %-*s  %s\n", width, r[0], r[1])
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// summaryRows returns each data point as its attributes and its figures.
func summaryRows(data metricdata.Aggregation) [][2]string {
	var rows [][2]string
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			rows = append(rows, [2]string{attrText(p.Attributes), strconv.FormatInt(p.Value, 10)})
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			rows = append(rows, [2]string{attrText(p.Attributes), num(p.Value)})
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			rows = append(rows, [2]string{attrText(p.Attributes), strconv.FormatInt(p.Value, 10)})
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			rows = append(rows, [2]string{attrText(p.Attributes), num(p.Value)})
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			rows = append(rows, [2]string{attrText(p.Attributes), histText(p.Count, float64(p.Sum), extremum(p.Max))})
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			rows = append(rows, [2]string{attrText(p.Attributes), histText(p.Count, p.Sum, extremum(p.Max))})
		}
	}
	return rows
}

func extremum[N int64 | float64](e metricdata.Extrema[N]) string {
	if v, ok := e.Value(); ok {
		return num(float64(v))
	}
	return ""
}

func histText(count uint64, sum float64, maxv string) string {
	s := fmt.Sprintf("count=%d sum=%s", count, num(sum))
	if count > 0 {
		s += " mean=" + num(sum/float64(count))
	}
	if maxv != "" {
		s += " max=" + maxv
	}
	return s
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

func attrText(set attribute.Set) string {
	if set.Len() == 0 {
		return "-"
	}
	parts := make([]string, 0, set.Len())
	for _, kv := range set.ToSlice() {
		parts = append(parts, strings.TrimPrefix(string(kv.Key), "retrace.")+"="+kv.Value.String())
	}
	return strings.Join(parts, " ")
}
