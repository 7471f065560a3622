package setup_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestReadEnv(t *testing.T) {
	const grpc, http = setup.ProtocolGRPC, setup.ProtocolHTTP
	tests := []struct {
		name string
		env  func(string) string
		want setup.Exporters
		err  string
	}{
		{"nothing set: console", env(), setup.Exporters{Console: true}, ""},
		{"endpoint without scheme: insecure gRPC", env("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317"),
			setup.Exporters{OTLP: true, Protocol: grpc, Endpoint: "localhost:4317", Insecure: true}, ""},
		{"http URL: OTLP/HTTP, the specification's default", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
			setup.Exporters{OTLP: true, Protocol: http, Endpoint: "127.0.0.1:4318", URL: "http://127.0.0.1:4318/v1/traces", Insecure: true}, ""},
		{"http URL over gRPC", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
			setup.Exporters{OTLP: true, Protocol: grpc, Endpoint: "127.0.0.1:4317", Insecure: true}, ""},
		{"https URL without port over gRPC", env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel.example.com", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
			setup.Exporters{OTLP: true, Protocol: grpc, Endpoint: "otel.example.com:4317"}, ""},
		{"https base URL with a path: the signal's path appended", env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp-gateway.example.net/otlp/"),
			setup.Exporters{OTLP: true, Protocol: http, Endpoint: "otlp-gateway.example.net", URL: "https://otlp-gateway.example.net/otlp/v1/traces"}, ""},
		{"per-signal URL used as it is", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:2/custom"),
			setup.Exporters{OTLP: true, Protocol: http, Endpoint: "b:2", URL: "http://b:2/custom", Insecure: true}, ""},
		{"per-signal URL without a path: the root", env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://b"),
			setup.Exporters{OTLP: true, Protocol: http, Endpoint: "b", URL: "https://b/"}, ""},
		{"user and query parts dropped", env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://user:pw@b:443/otlp?token=t"),
			setup.Exporters{OTLP: true, Protocol: http, Endpoint: "b:443", URL: "https://b:443/otlp/v1/traces"}, ""},
		{"host:port over OTLP/HTTP", env("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
			setup.Exporters{OTLP: true, Protocol: http, Endpoint: "localhost:4318", URL: "http://localhost:4318/v1/traces", Insecure: true}, ""},
		{"host:port over OTLP/HTTP with TLS", env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "otel:443", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_INSECURE", "false"),
			setup.Exporters{OTLP: true, Protocol: http, Endpoint: "otel:443", URL: "https://otel:443/v1/traces"}, ""},
		{"traces endpoint wins", env("OTEL_EXPORTER_OTLP_ENDPOINT", "a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "b:2"),
			setup.Exporters{OTLP: true, Protocol: grpc, Endpoint: "b:2", Insecure: true}, ""},
		{"traces protocol wins", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
			setup.Exporters{OTLP: true, Protocol: grpc, Endpoint: "a:1", Insecure: true}, ""},
		{"insecure=false overrides", env("OTEL_EXPORTER_OTLP_ENDPOINT", "a:1", "OTEL_EXPORTER_OTLP_INSECURE", "false"),
			setup.Exporters{OTLP: true, Protocol: grpc, Endpoint: "a:1"}, ""},
		{"otlp without endpoint: the default, OTLP/HTTP", env("OTEL_TRACES_EXPORTER", "otlp"),
			setup.Exporters{OTLP: true, Protocol: http, Endpoint: "localhost:4318", URL: "http://localhost:4318/v1/traces", Insecure: true}, ""},
		{"a protocol alone: OTLP to its default endpoint", env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
			setup.Exporters{OTLP: true, Protocol: grpc, Endpoint: "localhost:4317", Insecure: true}, ""},
		{"console explicitly", env("OTEL_TRACES_EXPORTER", "console", "OTEL_EXPORTER_OTLP_ENDPOINT", "a:1"), setup.Exporters{Console: true}, ""},
		{"both", env("OTEL_TRACES_EXPORTER", "otlp, console", "OTEL_EXPORTER_OTLP_ENDPOINT", "a:1"),
			setup.Exporters{OTLP: true, Protocol: grpc, Console: true, Endpoint: "a:1", Insecure: true}, ""},
		{"none", env("OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "a:1"), setup.Exporters{None: true}, ""},
		{"sdk disabled", env("OTEL_SDK_DISABLED", "true"), setup.Exporters{None: true}, ""},
		{"another name: autoexport's", env("OTEL_TRACES_EXPORTER", "zipkin"), setup.Exporters{Registered: "zipkin"}, ""},
		{"another name in a list", env("OTEL_TRACES_EXPORTER", "otlp,zipkin"), setup.Exporters{}, `OTEL_TRACES_EXPORTER="otlp,zipkin": "zipkin" is built by autoexport, which takes one name`},
		{"prometheus serves no traces", env("OTEL_TRACES_EXPORTER", "prometheus"), setup.Exporters{}, `OTEL_TRACES_EXPORTER="prometheus": prometheus serves metrics only`},
		{"unknown protocol", env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), setup.Exporters{}, `setup: OTEL_EXPORTER_OTLP_PROTOCOL="http/json": want grpc or http/protobuf`},
		{"unknown traces protocol", env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "udp", "OTEL_EXPORTER_OTLP_ENDPOINT", "a:1"), setup.Exporters{}, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="udp": want grpc or http/protobuf`},
		{"bad scheme", env("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://x:1"), setup.Exporters{}, `OTEL_EXPORTER_OTLP_ENDPOINT: "ftp://x:1": unknown scheme "ftp"`},
		{"grpc scheme over OTLP/HTTP", env("OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://x:1", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"), setup.Exporters{}, `unknown scheme "grpc" for OTLP/HTTP`},
		{"path without scheme", env("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317/v1/traces"), setup.Exporters{}, "want host:port or a URL"},
		{"no port without scheme", env("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost"), setup.Exporters{}, "want host:port or a URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := setup.ReadEnv(tt.env)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// An endpoint's credentials never reach an error: the user and query
// parts are left out of what it prints.
func TestReadEnvErrorsHideCredentials(t *testing.T) {
	for _, e := range []string{"ftp://user:pa55-w0rd-xyz@x:1/?token=pa55-w0rd-xyz", "user:pa55-w0rd-xyz@host:1"} {
		_, err := setup.ReadEnv(env("OTEL_EXPORTER_OTLP_ENDPOINT", e))
		require.Error(t, err)
		assert.NotContains(t, err.Error(), "pa55-w0rd-xyz")
	}
}

func TestNoneIsNoop(t *testing.T) {
	tp, shutdown, err := setup.NewTracerProvider(context.Background(), setup.WithEnv(env("OTEL_TRACES_EXPORTER", "none")))
	require.NoError(t, err)
	assert.IsType(t, noop.TracerProvider{}, tp)
	require.NoError(t, shutdown(context.Background()))
}

func TestConsoleTree(t *testing.T) {
	var out bytes.Buffer
	tp, shutdown, err := setup.NewTracerProvider(context.Background(), setup.WithEnv(env()), setup.WithConsole(&out))
	require.NoError(t, err)
	tr := tp.Tracer("t")
	ctx, root := tr.Start(context.Background(), "runtime")
	_, child := tr.Start(ctx, "runtime attempt")
	child.End()
	root.End()
	require.NoError(t, shutdown(context.Background()))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	assert.Regexp(t, `^trace [0-9a-f]{32}$`, lines[0])
	assert.Regexp(t, `^runtime  `, lines[1])
	assert.Regexp(t, `^└─ runtime attempt  `, lines[2])
}

// Another instrumentation's span names and status texts are not redacted
// where they were made: the tree redacts them as retrace's own sinks do.
func TestConsoleTreeRedactsForeignSpans(t *testing.T) {
	var out bytes.Buffer
	tp, shutdown, err := setup.NewTracerProvider(context.Background(), setup.WithEnv(env()), setup.WithConsole(&out))
	require.NoError(t, err)
	tr := tp.Tracer("someone-else")
	const key = "sk-proj-4f9aK2mQ7xT1vB8nZ3cL6pR0"
	ctx, root := tr.Start(context.Background(), "GET /v1?api_key="+key)
	_, child := tr.Start(ctx, "call")
	child.SetStatus(codes.Error, "401: Authorization: Bearer "+key+" was refused")
	child.End()
	root.End()
	require.NoError(t, shutdown(context.Background()))
	assert.NotContains(t, out.String(), key)
	assert.Contains(t, out.String(), "[REDACTED]")
	assert.Contains(t, out.String(), "was refused", "the rest of the text stays")
}

// A leaf that retrace.calls does not count says why in the tree, and the
// root how many there were.
func TestConsoleTreeSaysWhatIsNotCounted(t *testing.T) {
	var out bytes.Buffer
	tp, shutdown, err := setup.NewTracerProvider(context.Background(), setup.WithEnv(env()), setup.WithConsole(&out))
	require.NoError(t, err)
	tr := tp.Tracer("t")
	ctx, root := tr.Start(context.Background(), "task")
	_, child := tr.Start(ctx, "initialize")
	child.SetAttributes(telemetry.Uncounted.String(telemetry.UncountedHandshake))
	child.End()
	root.SetAttributes(telemetry.Calls.Int(0), telemetry.CallsUncounted.Int(1))
	root.End()
	require.NoError(t, shutdown(context.Background()))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	assert.Contains(t, lines[1], "calls=0  calls.uncounted=1")
	assert.Contains(t, lines[2], "uncounted=handshake")
}

// A retrying layer's row shows its attempts out of its limit: the
// outermost layer span's limit, left out where its worst case states it,
// is read from retrace.calls.worst_case; a limit the span states wins; a
// layer with neither shows its attempts alone.
func TestConsoleTreeShowsTheLimit(t *testing.T) {
	var out bytes.Buffer
	tp, shutdown, err := setup.NewTracerProvider(context.Background(), setup.WithEnv(env()), setup.WithConsole(&out))
	require.NoError(t, err)
	tr := tp.Tracer("t")
	ctx, root := tr.Start(context.Background(), "runtime")
	_, stated := tr.Start(ctx, "session")
	stated.SetAttributes(telemetry.Outcome.String("success"), telemetry.RetryDepth.Int(1), telemetry.MaxAttempts.Int(4), telemetry.Attempts.Int(2))
	stated.End()
	_, unknown := tr.Start(ctx, "plain")
	unknown.SetAttributes(telemetry.Outcome.String("success"), telemetry.RetryDepth.Int(1), telemetry.Attempts.Int(2))
	unknown.End()
	root.SetAttributes(telemetry.Outcome.String("failed_exhausted"), telemetry.Attempts.Int(3), telemetry.Calls.Int(3), telemetry.CallsWorstCase.Int(3))
	root.End()
	require.NoError(t, shutdown(context.Background()))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 4)
	assert.Contains(t, lines[1], "outcome=failed_exhausted attempts=3/3  calls=3")
	assert.Contains(t, lines[2], "outcome=success attempts=2/4")
	assert.Contains(t, lines[3], "outcome=success attempts=2")
	assert.NotContains(t, lines[3], "attempts=2/")
}

// collector is an OTLP gRPC trace receiver on 127.0.0.1.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
	attrs []string
	auth  []string // each request's authorization metadata
}

// startCollector runs a collector on a free port of 127.0.0.1 until the
// test ends, and returns it and its address.
func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	col := &collector{}
	collectortrace.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return col, lis.Addr().String()
}

func (c *collector) Export(ctx context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	md, _ := metadata.FromIncomingContext(ctx)
	c.auth = append(c.auth, strings.Join(md.Get("authorization"), ","))
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.Resource.Attributes {
			c.attrs = append(c.attrs, a.Key+"="+a.Value.GetStringValue())
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.names = append(c.names, s.Name)
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func TestOTLPExportToSchemelessEndpoint(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	col := &collector{}
	collectortrace.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	tp, shutdown, err := setup.NewTracerProvider(context.Background(),
		setup.WithEnv(env("OTEL_EXPORTER_OTLP_ENDPOINT", lis.Addr().String(), "OTEL_SERVICE_NAME", "retrace-test")))
	require.NoError(t, err)
	_, span := tp.Tracer("t").Start(context.Background(), "session")
	span.End()
	require.NoError(t, shutdown(context.Background()), "shutdown flushes the spans")

	col.mu.Lock()
	defer col.mu.Unlock()
	assert.Equal(t, []string{"session"}, col.names)
	assert.Contains(t, col.attrs, "service.name=retrace-test")
}

func TestUnreachableCollectorBoundedShutdown(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close()) // nothing listens there now

	var warn bytes.Buffer
	tp, shutdown, err := setup.NewTracerProvider(context.Background(),
		setup.WithEnv(env("OTEL_EXPORTER_OTLP_ENDPOINT", addr)), setup.WithWarnings(&warn),
		setup.WithShutdownTimeout(300*time.Millisecond))
	require.NoError(t, err)
	_, span := tp.Tracer("t").Start(context.Background(), "lost")
	span.End()

	require.Error(t, shutdown(context.Background()))
	require.NoError(t, shutdown(context.Background()), "a second shutdown is a no-op")
	assert.Equal(t, 1, strings.Count(warn.String(), "\n"), "exactly one warning: %q", warn.String())
	assert.Contains(t, warn.String(), "could not flush spans to the OTLP/gRPC receiver at "+addr)
}

// resourceOf starts and ends one span under a provider built from vars and
// returns its resource's attributes.
func resourceOf(t *testing.T, opts []setup.Option, vars ...string) map[string]string {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	opts = append([]setup.Option{setup.WithEnv(env(append([]string{"OTEL_TRACES_EXPORTER", "none"}, vars...)...)), setup.WithSpanProcessor(rec)}, opts...)
	tp, shutdown, err := setup.NewTracerProvider(context.Background(), opts...)
	require.NoError(t, err)
	_, span := tp.Tracer("t").Start(context.Background(), "s")
	span.End()
	require.NoError(t, shutdown(context.Background()))
	require.Len(t, rec.Ended(), 1)
	out := map[string]string{}
	for _, kv := range rec.Ended()[0].Resource().Attributes() {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// The resource carries the SDK's attributes and what the environment says;
// retrace's fallback name only fills in when neither variable names the
// service.
func TestResourceFromTheEnvironment(t *testing.T) {
	fallback := []setup.Option{setup.WithServiceName("fallback")}

	r := resourceOf(t, fallback, "OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs,deployment.environment.name=prod%20eu")
	assert.Equal(t, "from-attrs", r["service.name"], "OTEL_RESOURCE_ATTRIBUTES names the service")
	assert.Equal(t, "prod eu", r["deployment.environment.name"], "values are percent-decoded")
	assert.Equal(t, "go", r["telemetry.sdk.language"])
	assert.Equal(t, "opentelemetry", r["telemetry.sdk.name"])
	assert.NotEmpty(t, r["telemetry.sdk.version"])

	r = resourceOf(t, fallback, "OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs", "OTEL_SERVICE_NAME", "from-name")
	assert.Equal(t, "from-name", r["service.name"], "OTEL_SERVICE_NAME wins")

	r = resourceOf(t, fallback)
	assert.Equal(t, "fallback", r["service.name"], "the fallback when nothing names the service")

	_, _, err := setup.NewTracerProvider(context.Background(), setup.WithEnv(env("OTEL_RESOURCE_ATTRIBUTES", "token")))
	assert.ErrorContains(t, err, "is not key=value")
}
