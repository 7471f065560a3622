package setup_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	collectormetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"

	"github.com/retrace-go/retrace/telemetry/setup"
)

func TestReadMetricsEnv(t *testing.T) {
	tests := []struct {
		name string
		env  func(string) string
		want setup.Exporters
		err  string
	}{
		{"nothing set: console", env(), setup.Exporters{Console: true}, ""},
		{"the tracing endpoint serves metrics too", env("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317"),
			setup.Exporters{OTLP: true, Protocol: setup.ProtocolGRPC, Endpoint: "localhost:4317", Insecure: true}, ""},
		{"metrics endpoint wins", env("OTEL_EXPORTER_OTLP_ENDPOINT", "a:1", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "b:2", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "c:3"),
			setup.Exporters{OTLP: true, Protocol: setup.ProtocolGRPC, Endpoint: "b:2", Insecure: true}, ""},
		{"a base URL gets the metrics path", env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://gateway.example.net/otlp"),
			setup.Exporters{OTLP: true, Protocol: setup.ProtocolHTTP, Endpoint: "gateway.example.net", URL: "https://gateway.example.net/otlp/v1/metrics"}, ""},
		{"metrics protocol wins", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"),
			setup.Exporters{OTLP: true, Protocol: setup.ProtocolGRPC, Endpoint: "a:1", Insecure: true}, ""},
		{"the traces exporter does not decide", env("OTEL_TRACES_EXPORTER", "none"), setup.Exporters{Console: true}, ""},
		{"none", env("OTEL_METRICS_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "a:1"), setup.Exporters{None: true}, ""},
		{"prometheus: the specification's default address", env("OTEL_METRICS_EXPORTER", "prometheus"), setup.Exporters{Prometheus: "localhost:9464"}, ""},
		{"prometheus: host and port", env("OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST", "::1", "OTEL_EXPORTER_PROMETHEUS_PORT", "0"),
			setup.Exporters{Prometheus: "[::1]:0"}, ""},
		{"prometheus beside the console", env("OTEL_METRICS_EXPORTER", "prometheus,console", "OTEL_EXPORTER_PROMETHEUS_PORT", "9100"),
			setup.Exporters{Console: true, Prometheus: "localhost:9100"}, ""},
		{"prometheus: a port that is not one", env("OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT", "http"), setup.Exporters{},
			`OTEL_EXPORTER_PROMETHEUS_PORT="http": want a port number`},
		{"another name: autoexport's", env("OTEL_METRICS_EXPORTER", "mine"), setup.Exporters{Registered: "mine"}, ""},
		{"bad protocol", env("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json"), setup.Exporters{}, `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="http/json": want grpc or http/protobuf`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := setup.ReadMetricsEnv(tt.env)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestMetricsNoneIsNoop(t *testing.T) {
	mp, shutdown, err := setup.NewMeterProvider(context.Background(), setup.WithEnv(env("OTEL_METRICS_EXPORTER", "none")))
	require.NoError(t, err)
	assert.IsType(t, metricnoop.MeterProvider{}, mp)
	require.NoError(t, shutdown(context.Background()))
}

func record(mp metric.MeterProvider) {
	m := mp.Meter("t")
	c, _ := m.Int64Counter("retrace.layer.calls", metric.WithUnit("{call}"))
	c.Add(context.Background(), 3, metric.WithAttributes(attribute.String("retrace.layer", "runtime"), attribute.String("retrace.outcome", "failed_exhausted")))
	h, _ := m.Float64Histogram("retrace.retry.delay", metric.WithUnit("s"))
	for _, v := range []float64{2, 4, 8} {
		h.Record(context.Background(), v, metric.WithAttributes(attribute.String("retrace.layer", "session")))
	}
}

// The console form prints a summary at shutdown, and a reader of the
// caller's own sees the same figures.
func TestMetricsConsoleSummary(t *testing.T) {
	var out bytes.Buffer
	reader := sdkmetric.NewManualReader()
	mp, shutdown, err := setup.NewMeterProvider(context.Background(), setup.WithEnv(env()), setup.WithConsole(&out), setup.WithMetricReader(reader))
	require.NoError(t, err)
	record(mp)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	assert.Len(t, rm.ScopeMetrics[0].Metrics, 2)
	assert.Empty(t, out.String(), "nothing is printed before shutdown")

	require.NoError(t, shutdown(context.Background()))
	assert.Equal(t, `metrics
  retrace.layer.calls ({call})
    layer=runtime outcome=failed_exhausted  3
  retrace.retry.delay (s)
    layer=session  count=3 sum=14 mean=4.667 max=8
`, out.String())
	require.NoError(t, shutdown(context.Background()), "a second shutdown is a no-op")
}

// metricCollector is an OTLP gRPC metrics receiver on 127.0.0.1.
type metricCollector struct {
	collectormetric.UnimplementedMetricsServiceServer
	mu    sync.Mutex
	names []string
}

func (c *metricCollector) Export(_ context.Context, req *collectormetric.ExportMetricsServiceRequest) (*collectormetric.ExportMetricsServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rm := range req.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				c.names = append(c.names, m.Name)
			}
		}
	}
	return &collectormetric.ExportMetricsServiceResponse{}, nil
}

func TestMetricsOTLPExportAtShutdown(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	col := &metricCollector{}
	collectormetric.RegisterMetricsServiceServer(srv, col)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	var out bytes.Buffer
	mp, shutdown, err := setup.NewMeterProvider(context.Background(),
		setup.WithEnv(env("OTEL_EXPORTER_OTLP_ENDPOINT", lis.Addr().String())), setup.WithConsole(&out))
	require.NoError(t, err)
	record(mp)
	require.NoError(t, shutdown(context.Background()), "shutdown flushes the metrics")

	col.mu.Lock()
	defer col.mu.Unlock()
	assert.ElementsMatch(t, []string{"retrace.layer.calls", "retrace.retry.delay"}, col.names)
	assert.Empty(t, out.String(), "OTLP alone prints no summary")
}
