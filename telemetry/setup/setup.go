package setup

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Option configures [Tracing] and [NewTracerProvider]. A nil Option is a no-op.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	getenv          func(string) string
	console         io.Writer
	warnings        io.Writer
	serviceName     string
	shutdownTimeout time.Duration
	processors      []sdktrace.SpanProcessor
	sampler         sdktrace.Sampler
	readers         []sdkmetric.Reader // WithMetricReader
	prometheusURL   func(string)       // WithPrometheusURL
}

// WithEnv reads the OTEL_* variables setup reads itself through getenv
// instead of os.Getenv: the exporters, the OTLP protocol, endpoint,
// insecure flag and headers (see [ReadEnv]), the service name and the
// resource attributes. What setup does not read, the OTel SDK and exporters
// read from the process environment: the sampler, the batch and export
// intervals, the OTLP certificates and compression, and everything
// autoexport reads for an exporter it builds ([Exporters].Registered).
func WithEnv(getenv func(string) string) Option {
	return optionFunc(func(c *config) { c.getenv = getenv })
}

// WithConsole sets where the console tree of traces and the summary of
// metrics go; the default is stderr.
func WithConsole(w io.Writer) Option { return optionFunc(func(c *config) { c.console = w }) }

// WithWarnings sets where the one shutdown warning goes; the default is stderr.
func WithWarnings(w io.Writer) Option { return optionFunc(func(c *config) { c.warnings = w }) }

// WithServiceName sets service.name when OTEL_SERVICE_NAME is not set; the
// default is the program's name.
func WithServiceName(name string) Option { return optionFunc(func(c *config) { c.serviceName = name }) }

// WithShutdownTimeout bounds how long shutdown waits for the exporter; the
// default and the maximum is 5 s.
func WithShutdownTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.shutdownTimeout = d })
}

// WithSpanProcessor adds a span processor beside the exporter's (a recorder
// in tests, a second exporter).
func WithSpanProcessor(sp sdktrace.SpanProcessor) Option {
	return optionFunc(func(c *config) { c.processors = append(c.processors, sp) })
}

// WithSampler sets the sampler; the default is the SDK's (parent-based,
// always on, or OTEL_TRACES_SAMPLER).
func WithSampler(s sdktrace.Sampler) Option { return optionFunc(func(c *config) { c.sampler = s }) }

const maxShutdown = 5 * time.Second

// Tracing builds a tracer provider from the OTEL_* variables (see
// [NewTracerProvider]) and installs it, with the W3C trace-context
// propagator, as the global provider: it is meant for main, not for
// libraries. shutdown flushes the spans and restores nothing; it returns
// within 5 s even when the collector is unreachable, after one warning.
func Tracing(ctx context.Context, opts ...Option) (shutdown func(context.Context) error, err error) {
	tp, shutdown, err := NewTracerProvider(ctx, opts...)
	if err != nil {
		return nil, err
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return shutdown, nil
}

func newConfig(opts []Option) config {
	c := config{getenv: os.Getenv, console: os.Stderr, warnings: os.Stderr, shutdownTimeout: maxShutdown}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	c.shutdownTimeout = min(max(c.shutdownTimeout, time.Millisecond), maxShutdown)
	return c
}

// NewTracerProvider builds a tracer provider from the OTEL_* variables (see
// [ReadEnv]) without touching the globals, and returns it with its bounded
// shutdown. With OTEL_TRACES_EXPORTER=none and no span processor of its own
// it returns a no-op provider.
func NewTracerProvider(ctx context.Context, opts ...Option) (trace.TracerProvider, func(context.Context) error, error) {
	c := newConfig(opts)
	x, err := ReadEnv(c.getenv)
	if err != nil {
		return nil, nil, err
	}
	if x.None && len(c.processors) == 0 {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	headers, err := readHeaders(c.getenv, "TRACES")
	if err != nil {
		return nil, nil, err
	}
	res, err := newResource(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if c.sampler != nil {
		tpOpts = append(tpOpts, sdktrace.WithSampler(c.sampler))
	}
	var rec *recordingExporter
	if x.OTLP || x.Registered != "" {
		exp, err := newSpanExporter(ctx, x, c, headers)
		if err != nil {
			return nil, nil, err
		}
		// The final export's deadline falls inside shutdown's, so a flush
		// to an unreachable receiver always fails as an export the
		// recorder sees, never as a race between the two deadlines.
		rec = &recordingExporter{SpanExporter: exp, known: headerValues(headers)}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(rec, sdktrace.WithExportTimeout(c.shutdownTimeout*9/10)))
	}
	if x.Console {
		tpOpts = append(tpOpts, sdktrace.WithSyncer(NewConsoleExporter(c.console)))
	}
	for _, p := range c.processors {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(p))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)

	shutdown := c.boundedOnce(func(sctx context.Context) (err error) {
		if rec != nil {
			rec.failed.Store(nil)
		}
		err = tp.Shutdown(sctx)
		if err == nil && rec != nil {
			// The batcher hands a failed final export to the global error
			// handler and reports success when its own deadline fired
			// before shutdown's; the exporter saw the failure either way.
			if e := rec.failed.Load(); e != nil {
				err = *e
			}
		}
		if err != nil && rec != nil {
			fmt.Fprintf(c.warnings, "retrace: could not flush spans to %s within %s; spans were dropped (%s%s)\n",
				x.where(), c.shutdownTimeout, safeErr(err, headers), x.hint())
		}
		return err
	})
	return tp, shutdown, nil
}

// boundedOnce is a provider's shutdown: f runs once, within the shutdown
// timeout; later calls return nil at once.
func (c config) boundedOnce(f func(ctx context.Context) error) func(context.Context) error {
	var once sync.Once
	return func(ctx context.Context) error {
		var err error
		once.Do(func() {
			sctx, cancel := context.WithTimeout(ctx, c.shutdownTimeout)
			defer cancel()
			err = f(sctx)
		})
		return err
	}
}

// recordingExporter remembers the last failed export, so that shutdown can
// report a flush that failed whichever deadline ended it, and redacts the
// errors it returns of the OTLP headers' values (known): the SDK logs them
// through the global error handler, and a receiver may echo a token in
// the body of its refusal.
type recordingExporter struct {
	sdktrace.SpanExporter
	known  []string
	failed atomic.Pointer[error]
}

func (r *recordingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := r.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		err = &redactedError{err: err, known: r.known}
		r.failed.Store(&err)
	}
	return err
}
