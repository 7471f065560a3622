package setup_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	collectormetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/retrace-go/retrace/telemetry/setup"
)

// otelVars are the variables these tests set: each test starts from none
// of them, whatever the environment the tests run in says.
var otelVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
	"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_METRICS_INSECURE",
	"OTEL_EXPORTER_PROMETHEUS_HOST", "OTEL_EXPORTER_PROMETHEUS_PORT",
}

// setenv clears otelVars and sets kv in the process environment for the
// test: the exporters read it, as in a program.
func setenv(t *testing.T, kv ...string) {
	t.Helper()
	for _, k := range otelVars {
		t.Setenv(k, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// httpReceiver is an OTLP/HTTP receiver on 127.0.0.1: it decodes each
// protobuf request, traces or (on a path ending in "metrics") metrics, and
// answers status and body instead when status is set.
type httpReceiver struct {
	*httptest.Server
	status int
	body   string

	mu           sync.Mutex
	paths        []string
	contentTypes []string
	auth         []string
	spans        []string
	metrics      []string
	attrs        []string
}

func startHTTPReceiver(t *testing.T) *httpReceiver {
	t.Helper()
	r := &httpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *httpReceiver) hostPort() string { return strings.TrimPrefix(r.URL, "http://") }

func (r *httpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paths = append(r.paths, req.URL.Path)
	r.contentTypes = append(r.contentTypes, req.Header.Get("Content-Type"))
	r.auth = append(r.auth, req.Header.Get("Authorization"))
	if r.status != 0 {
		w.WriteHeader(r.status)
		_, _ = io.WriteString(w, r.body)
		return
	}
	var resp proto.Message
	if strings.HasSuffix(req.URL.Path, "metrics") {
		var m collectormetric.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rm := range m.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, x := range sm.Metrics {
					r.metrics = append(r.metrics, x.Name)
				}
			}
		}
		resp = &collectormetric.ExportMetricsServiceResponse{}
	} else {
		var tr collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range tr.ResourceSpans {
			for _, a := range rs.Resource.Attributes {
				r.attrs = append(r.attrs, a.Key+"="+a.Value.GetStringValue())
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					r.spans = append(r.spans, s.Name)
				}
			}
		}
		resp = &collectortrace.ExportTraceServiceResponse{}
	}
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// oneSpan ends one span named "session" under tp, then shuts tp down,
// which flushes it.
func oneSpan(t *testing.T, tp trace.TracerProvider, shutdown func(context.Context) error) {
	t.Helper()
	_, span := tp.Tracer("t").Start(context.Background(), "session")
	span.End()
	require.NoError(t, shutdown(context.Background()), "shutdown flushes the spans")
}

// The token of the tests' Authorization header, percent-encoded in the
// variable as the specification writes a header value.
const (
	authEnv  = "Authorization=Basic%20cmV0cmFjZTpzM2NyM3QtdDBrZW4tNzc3"
	authSent = "Basic cmV0cmFjZTpzM2NyM3QtdDBrZW4tNzc3"
)

// Spans reach an OTLP/HTTP receiver, protobuf-encoded, at the path the
// endpoint's form says, with the headers of OTEL_EXPORTER_OTLP_HEADERS.
func TestOTLPOverHTTP(t *testing.T) {
	rcv := startHTTPReceiver(t)
	tests := []struct {
		name string
		env  []string
		path string
	}{
		{"a URL, the protocol unset: http/protobuf", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL}, "/v1/traces"},
		{"host:port with http/protobuf", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", rcv.hostPort(), "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"}, "/v1/traces"},
		{"a base URL with a path", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL + "/otlp"}, "/otlp/v1/traces"},
		{"the traces endpoint as it is", []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rcv.URL + "/custom/traces", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"}, "/custom/traces"},
		{"the traces protocol wins", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL, "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"}, "/v1/traces"},
		{"otlp named, and the console", []string{"OTEL_TRACES_EXPORTER", "otlp,console", "OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL}, "/v1/traces"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setenv(t, append([]string{"OTEL_SERVICE_NAME", "retrace-http", "OTEL_EXPORTER_OTLP_HEADERS", authEnv}, tt.env...)...)
			rcv.mu.Lock()
			rcv.paths, rcv.contentTypes, rcv.auth, rcv.spans, rcv.attrs = nil, nil, nil, nil, nil
			rcv.mu.Unlock()

			var console bytes.Buffer
			tp, shutdown, err := setup.NewTracerProvider(context.Background(), setup.WithConsole(&console))
			require.NoError(t, err)
			oneSpan(t, tp, shutdown)

			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			assert.Equal(t, []string{tt.path}, rcv.paths)
			assert.Equal(t, []string{"application/x-protobuf"}, rcv.contentTypes)
			assert.Equal(t, []string{authSent}, rcv.auth)
			assert.Equal(t, []string{"session"}, rcv.spans)
			assert.Contains(t, rcv.attrs, "service.name=retrace-http")
			if strings.Contains(tt.name, "console") {
				assert.Contains(t, console.String(), "\nsession  ")
			} else {
				assert.Empty(t, console.String(), "OTLP alone prints nothing")
			}
		})
	}
}

// Spans reach an OTLP/gRPC receiver from an endpoint with or without a
// scheme, with the headers as metadata.
func TestOTLPOverGRPC(t *testing.T) {
	col, addr := startCollector(t)
	tests := []struct {
		name string
		env  []string
	}{
		{"host:port, the protocol unset: insecure gRPC", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", addr}},
		{"an http URL with grpc", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://" + addr, "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}},
		{"the traces protocol wins", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://" + addr, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"}},
		{"the traces endpoint and headers win", []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", addr, "OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:1",
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS", authEnv, "OTEL_EXPORTER_OTLP_HEADERS", "Authorization=other"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setenv(t, append([]string{"OTEL_SERVICE_NAME", "retrace-grpc", "OTEL_EXPORTER_OTLP_HEADERS", authEnv}, tt.env...)...)
			col.mu.Lock()
			col.names, col.attrs, col.auth = nil, nil, nil
			col.mu.Unlock()

			tp, shutdown, err := setup.NewTracerProvider(context.Background(), setup.WithConsole(io.Discard))
			require.NoError(t, err)
			oneSpan(t, tp, shutdown)

			col.mu.Lock()
			defer col.mu.Unlock()
			assert.Equal(t, []string{"session"}, col.names)
			assert.Equal(t, []string{authSent}, col.auth)
			assert.Contains(t, col.attrs, "service.name=retrace-grpc")
		})
	}
}

// none records nothing and sends nothing, whatever endpoint is set.
func TestExporterNone(t *testing.T) {
	rcv := startHTTPReceiver(t)
	setenv(t, "OTEL_TRACES_EXPORTER", "none", "OTEL_METRICS_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	tp, shutdown, err := setup.NewTracerProvider(context.Background())
	require.NoError(t, err)
	assert.IsType(t, noop.TracerProvider{}, tp)
	oneSpan(t, tp, shutdown)
	mp, mshutdown, err := setup.NewMeterProvider(context.Background())
	require.NoError(t, err)
	assert.IsType(t, metricnoop.MeterProvider{}, mp)
	record(mp)
	require.NoError(t, mshutdown(context.Background()))

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	assert.Empty(t, rcv.paths)
}

// console is retrace's tree, on the console writer, and nothing is sent
// to the endpoint that is set.
func TestExporterConsole(t *testing.T) {
	rcv := startHTTPReceiver(t)
	setenv(t, "OTEL_TRACES_EXPORTER", "console", "OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	var out bytes.Buffer
	tp, shutdown, err := setup.NewTracerProvider(context.Background(), setup.WithConsole(&out))
	require.NoError(t, err)
	oneSpan(t, tp, shutdown)
	assert.Regexp(t, `^trace [0-9a-f]{32}\nsession  \S+\n$`, out.String())

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	assert.Empty(t, rcv.paths)
}

// A protocol setup does not speak is an error that names the variable,
// its value and what it takes, for both signals.
func TestBadProtocolIsAClearError(t *testing.T) {
	setenv(t, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, err := setup.Tracing(context.Background())
	require.EqualError(t, err, `setup: OTEL_EXPORTER_OTLP_PROTOCOL="http/json": want grpc or http/protobuf`)
	_, err = setup.Metrics(context.Background())
	require.EqualError(t, err, `setup: OTEL_EXPORTER_OTLP_PROTOCOL="http/json": want grpc or http/protobuf`)

	setenv(t, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "GRPC ", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift")
	_, _, err = setup.NewTracerProvider(context.Background())
	require.EqualError(t, err, `setup: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="thrift": want grpc or http/protobuf`)
	x, err := setup.ReadMetricsEnv(os.Getenv)
	require.NoError(t, err, "a protocol is read trimmed and in any case")
	assert.Equal(t, setup.ProtocolGRPC, x.Protocol)
}

// A receiver that refuses the export, echoing the token it was sent, costs
// one warning that names the receiver and the protocol, and neither it,
// the error shutdown returns nor what the SDK logs holds the token.
func TestHeadersNeverPrinted(t *testing.T) {
	rcv := startHTTPReceiver(t)
	rcv.status, rcv.body = http.StatusUnauthorized, "invalid credentials: "+authSent
	setenv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL, "OTEL_EXPORTER_OTLP_HEADERS", authEnv)

	var logged []string
	var logMu sync.Mutex
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logMu.Lock()
		defer logMu.Unlock()
		logged = append(logged, err.Error())
	}))
	t.Cleanup(func() { otel.SetErrorHandler(prev) })

	var warn bytes.Buffer
	tp, shutdown, err := setup.NewTracerProvider(context.Background(), setup.WithWarnings(&warn))
	require.NoError(t, err)
	_, span := tp.Tracer("t").Start(context.Background(), "refused")
	span.End()
	err = shutdown(context.Background())
	require.Error(t, err)

	rcv.mu.Lock()
	assert.Equal(t, []string{authSent}, rcv.auth, "the header was sent")
	rcv.mu.Unlock()
	assert.Equal(t, 1, strings.Count(warn.String(), "\n"), "one warning: %q", warn.String())
	assert.Contains(t, warn.String(), "retrace: could not flush spans to the OTLP/HTTP receiver at "+rcv.URL+"/v1/traces within 5s")
	assert.Contains(t, warn.String(), "401 Unauthorized")
	assert.Contains(t, warn.String(), "[REDACTED]")
	const token = "cmV0cmFjZTpzM2NyM3QtdDBrZW4tNzc3"
	assert.NotContains(t, warn.String(), token)
	assert.NotContains(t, err.Error(), token)
	logMu.Lock()
	defer logMu.Unlock()
	for _, l := range logged {
		assert.NotContains(t, l, token)
	}
}

// Headers the exporters could not read are an error that names the pair's
// place or key, never its value (the exporters would log it whole).
func TestBadHeadersNameNoValue(t *testing.T) {
	setenv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317", "OTEL_EXPORTER_OTLP_HEADERS", "x-team=a, Bearer s3cr3t-t0ken-888")
	_, _, err := setup.NewTracerProvider(context.Background())
	require.EqualError(t, err, "setup: OTEL_EXPORTER_OTLP_HEADERS: pair 2 is not key=value")

	setenv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317", "OTEL_EXPORTER_OTLP_METRICS_HEADERS", "Authorization=s3cr3t%zz-t0ken-888")
	_, _, err = setup.NewMeterProvider(context.Background())
	require.EqualError(t, err, `setup: OTEL_EXPORTER_OTLP_METRICS_HEADERS: the value of "Authorization" is not percent-encoded`)
}

// Metrics reach an OTLP/HTTP receiver at the metrics path, at shutdown.
func TestMetricsOverHTTP(t *testing.T) {
	rcv := startHTTPReceiver(t)
	setenv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL+"/otlp", "OTEL_EXPORTER_OTLP_METRICS_HEADERS", authEnv)
	var out bytes.Buffer
	mp, shutdown, err := setup.NewMeterProvider(context.Background(), setup.WithConsole(&out))
	require.NoError(t, err)
	record(mp)
	require.NoError(t, shutdown(context.Background()), "shutdown flushes the metrics")

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	assert.Equal(t, []string{"/otlp/v1/metrics"}, rcv.paths)
	assert.Equal(t, []string{authSent}, rcv.auth)
	assert.ElementsMatch(t, []string{"retrace.layer.calls", "retrace.retry.delay"}, rcv.metrics)
	assert.Empty(t, out.String(), "OTLP alone prints no summary")
}

// OTEL_METRICS_EXPORTER=prometheus and its host and port are read from the
// process environment too, without WithEnv: the scrape endpoint serves
// until shutdown.
func TestMetricsPrometheusFromProcessEnv(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	require.NoError(t, lis.Close()) // setup binds it

	setenv(t, "OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT", port)
	mp, shutdown, err := setup.NewMeterProvider(context.Background())
	require.NoError(t, err)
	record(mp)

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://127.0.0.1:" + port + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	assert.Contains(t, string(body), `retrace_layer_calls_total{`)
	assert.Contains(t, string(body), `retrace_layer="runtime"`)
	require.NoError(t, shutdown(context.Background()))
	_, err = client.Get("http://127.0.0.1:" + port + "/metrics")
	assert.Error(t, err, "shutdown stops the scrape endpoint")
}

// A name setup does not build is autoexport's; one autoexport does not
// know either is a clear error, and one WithEnv names but the process
// environment does not is refused, as autoexport would build another.
func TestRegisteredExporterNames(t *testing.T) {
	setenv(t, "OTEL_TRACES_EXPORTER", "zipkin")
	_, _, err := setup.NewTracerProvider(context.Background())
	require.ErrorContains(t, err, `setup: OTEL_TRACES_EXPORTER="zipkin": want otlp, console or none, or a name registered with autoexport.RegisterSpanExporter: `)

	setenv(t)
	_, _, err = setup.NewMeterProvider(context.Background(), setup.WithEnv(env("OTEL_METRICS_EXPORTER", "mine")))
	require.EqualError(t, err, `setup: OTEL_METRICS_EXPORTER="mine" is built by autoexport, which reads the process environment, where OTEL_METRICS_EXPORTER=""`)
}
