package setup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
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
}

// WithEnv reads the OTEL_* variables through getenv instead of os.Getenv.
func WithEnv(getenv func(string) string) Option {
	return optionFunc(func(c *config) { c.getenv = getenv })
}

// WithConsole sets where the console tree goes; the default is stderr.
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

// Exporters describes what the OTEL_* variables ask for.
type Exporters struct {
	OTLP     bool   // export over OTLP gRPC
	Endpoint string // host:port of the OTLP receiver
	Insecure bool   // plain-text gRPC
	Console  bool   // print trees
	None     bool   // record nothing
}

// ReadEnv reads OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT and
// OTEL_EXPORTER_OTLP_(TRACES_)INSECURE. An endpoint without a scheme
// ("localhost:4317") means insecure gRPC, where the OTel exporter alone
// would drop it.
func ReadEnv(getenv func(string) string) (Exporters, error) { return readEnv(getenv, "TRACES") }

// readEnv reads what the OTEL_* variables ask of one signal (TRACES,
// METRICS): its exporter, else OTLP when an endpoint is set, else the
// console.
func readEnv(getenv func(string) string, signal string) (Exporters, error) {
	var x Exporters
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return Exporters{None: true}, nil
	}
	endpoint := first(getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT"), getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	kinds := strings.Split(strings.ToLower(getenv("OTEL_"+signal+"_EXPORTER")), ",")
	for _, k := range kinds {
		switch strings.TrimSpace(k) {
		case "":
			if endpoint != "" {
				x.OTLP = true
			} else {
				x.Console = true
			}
		case "otlp":
			x.OTLP = true
		case "console", "logging", "stdout":
			x.Console = true
		case "none":
			x.None = true
		default:
			return x, fmt.Errorf("setup: OTEL_%s_EXPORTER=%q: want otlp, console or none", signal, k)
		}
	}
	if x.None {
		return Exporters{None: true}, nil
	}
	if x.OTLP {
		if endpoint == "" {
			endpoint = "localhost:4317" // the OTLP default
		}
		host, insecure, err := parseEndpoint(endpoint)
		if err != nil {
			return x, err
		}
		x.Endpoint, x.Insecure = host, insecure
		if v := first(getenv("OTEL_EXPORTER_OTLP_"+signal+"_INSECURE"), getenv("OTEL_EXPORTER_OTLP_INSECURE")); v != "" {
			x.Insecure = strings.EqualFold(v, "true")
		}
	}
	return x, nil
}

// parseEndpoint turns an OTLP endpoint into host:port and whether it is
// plain text: "localhost:4317" and "http://…" are, "https://…" is not.
func parseEndpoint(e string) (hostport string, insecure bool, err error) {
	if !strings.Contains(e, "://") {
		if strings.ContainsAny(e, "/?#") {
			return "", false, fmt.Errorf("setup: OTLP endpoint %q: want host:port or a URL", e)
		}
		return e, true, nil
	}
	u, err := url.Parse(e)
	if err != nil || u.Host == "" {
		return "", false, fmt.Errorf("setup: OTLP endpoint %q: want host:port or a URL", e)
	}
	switch u.Scheme {
	case "http", "grpc":
		insecure = true
	case "https", "grpcs":
	default:
		return "", false, fmt.Errorf("setup: OTLP endpoint %q: unknown scheme %q", e, u.Scheme)
	}
	hostport = u.Host
	if u.Port() == "" {
		hostport += ":4317"
	}
	return hostport, insecure, nil
}

func first(vs ...string) string {
	for _, v := range vs {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
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
// shutdown. With OTEL_TRACES_EXPORTER=none it returns a no-op provider.
func NewTracerProvider(ctx context.Context, opts ...Option) (trace.TracerProvider, func(context.Context) error, error) {
	c := newConfig(opts)
	x, err := ReadEnv(c.getenv)
	if err != nil {
		return nil, nil, err
	}
	if x.None && len(c.processors) == 0 {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}

	var tpOpts []sdktrace.TracerProviderOption
	var rec *recordingExporter
	res, err := newResource(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	tpOpts = append(tpOpts, sdktrace.WithResource(res))
	if c.sampler != nil {
		tpOpts = append(tpOpts, sdktrace.WithSampler(c.sampler))
	}
	if x.OTLP {
		gopts := []otlptracegrpc.Option{
			otlptracegrpc.WithEndpoint(x.Endpoint),
			otlptracegrpc.WithTimeout(c.shutdownTimeout),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{
				Enabled: true, InitialInterval: 250 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: c.shutdownTimeout,
			}),
		}
		if x.Insecure {
			gopts = append(gopts, otlptracegrpc.WithInsecure())
		}
		if h := parseHeaders(first(c.getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS"), c.getenv("OTEL_EXPORTER_OTLP_HEADERS"))); len(h) > 0 {
			gopts = append(gopts, otlptracegrpc.WithHeaders(h))
		}
		exp, err := otlptracegrpc.New(ctx, gopts...)
		if err != nil {
			return nil, nil, fmt.Errorf("setup: OTLP exporter for %s: %w", x.Endpoint, err)
		}
		// The final export's deadline falls inside shutdown's, so a flush
		// to an unreachable receiver always fails as an export the
		// recorder sees, never as a race between the two deadlines.
		rec = &recordingExporter{SpanExporter: exp}
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
		if err != nil && x.OTLP {
			fmt.Fprintf(c.warnings, "retrace: could not flush spans to the OTLP receiver at %s within %s; spans were dropped (%v)\n",
				x.Endpoint, c.shutdownTimeout, shortErr(err))
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
// report a flush that failed whichever deadline ended it.
type recordingExporter struct {
	sdktrace.SpanExporter
	failed atomic.Pointer[error]
}

func (r *recordingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := r.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		r.failed.Store(&err)
	}
	return err
}

// parseHeaders reads "k1=v1,k2=v2". Values are never printed: they often
// carry tokens.
func parseHeaders(s string) map[string]string {
	h := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			continue
		}
		if dk, err := url.QueryUnescape(strings.TrimSpace(k)); err == nil {
			k = dk
		}
		if dv, err := url.QueryUnescape(strings.TrimSpace(v)); err == nil {
			v = dv
		}
		h[k] = v
	}
	return h
}

func shortErr(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
