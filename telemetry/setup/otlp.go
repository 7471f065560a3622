package setup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/retrace-go/retrace/internal/redact"
)

// Setup builds the OTLP exporters itself, with the constructors autoexport
// calls (otlptracegrpc.New, otlptracehttp.New and their metric twins), and
// leaves every other exporter name to autoexport. autoexport's own "otlp"
// takes no options and reads the process environment alone, so it could
// not carry what setup adds: an endpoint without a scheme (the exporters
// read "localhost:4317" as a URL whose scheme is "localhost", dialled with
// TLS, and cannot parse "127.0.0.1:4317" at all), WithEnv, and a timeout
// and retry bounded by the shutdown timeout. Whatever setup does not pass
// (certificates, client keys, compression) the exporters still read from
// the process environment.

// newSpanExporter builds the exporter x names, but for the console: OTLP
// over x's protocol, or autoexport's exporter of x.Registered.
func newSpanExporter(ctx context.Context, x Exporters, c config, headers map[string]string) (sdktrace.SpanExporter, error) {
	if x.Registered != "" {
		if err := sameInProcess(c.getenv, "OTEL_TRACES_EXPORTER"); err != nil {
			return nil, err
		}
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("setup: OTEL_TRACES_EXPORTER=%q: want otlp, console or none, or a name registered with autoexport.RegisterSpanExporter: %w",
				x.Registered, err)
		}
		return exp, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	if x.Protocol == ProtocolGRPC {
		opts := []otlptracegrpc.Option{
			otlptracegrpc.WithEndpoint(x.Endpoint),
			otlptracegrpc.WithTimeout(c.shutdownTimeout),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig(retryWithin(c.shutdownTimeout))),
		}
		if x.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		if len(headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(headers))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	} else {
		opts := []otlptracehttp.Option{
			otlptracehttp.WithEndpointURL(x.URL),
			otlptracehttp.WithTimeout(c.shutdownTimeout),
			otlptracehttp.WithRetry(otlptracehttp.RetryConfig(retryWithin(c.shutdownTimeout))),
		}
		if len(headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(headers))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("setup: OTLP exporter for %s: %s", x.where(), safeErr(err, headers))
	}
	return exp, nil
}

// newMetricReader is newSpanExporter for metrics: a periodic reader of the
// OTLP exporter (every OTEL_METRIC_EXPORT_INTERVAL, and at shutdown), or
// autoexport's reader of x.Registered (prometheus serves its own scrape
// endpoint, at OTEL_EXPORTER_PROMETHEUS_HOST and _PORT).
func newMetricReader(ctx context.Context, x Exporters, c config, headers map[string]string) (sdkmetric.Reader, error) {
	if x.Registered != "" {
		if err := sameInProcess(c.getenv, "OTEL_METRICS_EXPORTER"); err != nil {
			return nil, err
		}
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("setup: OTEL_METRICS_EXPORTER=%q: want otlp, console, none or prometheus, or a name registered with autoexport.RegisterMetricReader: %w",
				x.Registered, err)
		}
		return r, nil
	}
	timeout := c.shutdownTimeout * 9 / 10
	var exp sdkmetric.Exporter
	var err error
	if x.Protocol == ProtocolGRPC {
		opts := []otlpmetricgrpc.Option{
			otlpmetricgrpc.WithEndpoint(x.Endpoint),
			otlpmetricgrpc.WithTimeout(timeout),
			otlpmetricgrpc.WithRetry(otlpmetricgrpc.RetryConfig(retryWithin(timeout))),
		}
		if x.Insecure {
			opts = append(opts, otlpmetricgrpc.WithInsecure())
		}
		if len(headers) > 0 {
			opts = append(opts, otlpmetricgrpc.WithHeaders(headers))
		}
		exp, err = otlpmetricgrpc.New(ctx, opts...)
	} else {
		opts := []otlpmetrichttp.Option{
			otlpmetrichttp.WithEndpointURL(x.URL),
			otlpmetrichttp.WithTimeout(timeout),
			otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig(retryWithin(timeout))),
		}
		if len(headers) > 0 {
			opts = append(opts, otlpmetrichttp.WithHeaders(headers))
		}
		exp, err = otlpmetrichttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("setup: OTLP metric exporter for %s: %s", x.where(), safeErr(err, headers))
	}
	return sdkmetric.NewPeriodicReader(redactingMetricExporter{Exporter: exp, known: headerValues(headers)}), nil
}

// redactedError is an exporter's error whose text is redacted of the OTLP
// headers' values and of whatever else looks like a secret; errors.Is and
// errors.As still see the error itself.
type redactedError struct {
	err   error
	known []string
}

func (e *redactedError) Error() string { return redact.Text(e.err.Error(), e.known, 0) }
func (e *redactedError) Unwrap() error { return e.err }

// redactingMetricExporter is recordingExporter's redaction for metrics: the
// periodic reader logs a failed export through the global error handler.
type redactingMetricExporter struct {
	sdkmetric.Exporter
	known []string
}

func (e redactingMetricExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	if err := e.Exporter.Export(ctx, rm); err != nil {
		return &redactedError{err: err, known: e.known}
	}
	return nil
}

// retry is the retry every OTLP exporter of setup's gets: short waits, and
// all of them within d, the bound on shutdown, so that a final flush gives
// up (and shutdown warns) before shutdown's own deadline cuts it.
type retry = struct {
	Enabled         bool
	InitialInterval time.Duration
	MaxInterval     time.Duration
	MaxElapsedTime  time.Duration
}

func retryWithin(d time.Duration) retry {
	return retry{Enabled: true, InitialInterval: 250 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: d}
}

// sameInProcess checks that the process environment names the exporter
// the configured one does: autoexport reads the process environment, which
// WithEnv does not reach.
func sameInProcess(getenv func(string) string, name string) error {
	want, got := strings.TrimSpace(getenv(name)), strings.TrimSpace(os.Getenv(name))
	if want != got {
		return fmt.Errorf("setup: %s=%q is built by autoexport, which reads the process environment, where %s=%q", name, want, name, got)
	}
	return nil
}

// where names where x sends its data, for errors and warnings: the
// receiver's URL or address and protocol, or the registered exporter's
// name; never a header.
func (x Exporters) where() string {
	switch {
	case x.Registered != "":
		return fmt.Sprintf("the %q exporter", x.Registered)
	case x.Protocol == ProtocolHTTP:
		return "the OTLP/HTTP receiver at " + x.URL
	}
	return "the OTLP/gRPC receiver at " + x.Endpoint
}

// hint is what a failed export adds when x speaks one protocol to the
// other's well-known port, the usual reason an export fails at once.
func (x Exporters) hint() string {
	_, port, _ := net.SplitHostPort(x.Endpoint)
	switch {
	case x.OTLP && x.Protocol == ProtocolHTTP && port == "4317":
		return "; 4317 is the OTLP/gRPC port: OTEL_EXPORTER_OTLP_PROTOCOL=grpc speaks it"
	case x.OTLP && x.Protocol == ProtocolGRPC && port == "4318":
		return "; 4318 is the OTLP/HTTP port: OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf speaks it"
	}
	return ""
}

// safeErr is an exporter's error as setup prints it: redacted of the
// headers' values and of whatever else looks like a secret, then cut short
// (in that order, so that no cut halves a secret out of reach).
func safeErr(err error, headers map[string]string) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	return redact.Text(err.Error(), headerValues(headers), 200)
}
