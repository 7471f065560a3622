package setup_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/retrace-go/retrace/telemetry/setup"
)

// scrape fetches url as Prometheus does, asking for OpenMetrics, over a
// connection closed after the answer (a kept-alive one would outlive the
// test as the client's goroutines).
func scrape(t *testing.T, url string) (contentType, body string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return resp.Header.Get("Content-Type"), string(b)
}

// OTEL_METRICS_EXPORTER=prometheus serves the metrics at /metrics, as
// OpenMetrics with exemplars that name the span a measurement was made in,
// until shutdown, which stops the server (the package's leak check sees
// its goroutine gone).
func TestMetricsPrometheus(t *testing.T) {
	var url string
	mp, shutdown, err := setup.NewMeterProvider(context.Background(),
		setup.WithEnv(env("OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT", "0", "OTEL_SERVICE_NAME", "svc")),
		setup.WithPrometheusURL(func(u string) { url = u }))
	require.NoError(t, err)
	defer func() { _ = shutdown(context.Background()) }()
	require.Regexp(t, `^http://127\.0\.0\.1:[1-9][0-9]*/metrics$`, url, "the port bound, not 0")

	// A measurement inside a sampled span: its exemplar carries the span.
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("t").Start(context.Background(), "attempt")
	h, err := mp.Meter("t").Float64Histogram("retrace.retry.delay", metric.WithUnit("s"))
	require.NoError(t, err)
	h.Record(ctx, 4, metric.WithAttributes(attribute.String("retrace.layer", "session")))
	span.End()
	record(mp)

	ctype, body := scrape(t, url)
	assert.Contains(t, ctype, "application/openmetrics-text")
	assert.Regexp(t, `(?m)^retrace_layer_calls_total\{[^}]*retrace_layer="runtime"[^}]*retrace_outcome="failed_exhausted"[^}]*\} 3(\.0)?$`, body)
	assert.Regexp(t, `(?m)^retrace_retry_delay_seconds_count\{[^}]*retrace_layer="session"[^}]*\} 4$`, body)
	assert.Regexp(t, `(?m)^target_info\{[^}]*service_name="svc"`, body)
	ex := regexp.MustCompile(`(?m)^retrace_retry_delay_seconds_bucket\{[^}]*\} \d+ # \{[^}]*trace_id="([0-9a-f]{32})"[^}]*\} 4`).FindStringSubmatch(body)
	require.NotNil(t, ex, "a bucket's exemplar names the trace:\n%s", body)
	assert.Equal(t, span.SpanContext().TraceID().String(), ex[1])

	require.NoError(t, shutdown(context.Background()))
	_, err = (&net.Dialer{}).DialContext(context.Background(), "tcp", url[len("http://"):len(url)-len("/metrics")])
	assert.Error(t, err, "nothing listens after shutdown")
}

// A port that is taken is an error that names the variables, and leaves
// nothing running.
func TestMetricsPrometheusPortTaken(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	_, _, err = setup.NewMeterProvider(context.Background(),
		setup.WithEnv(env("OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT", port)))
	require.ErrorContains(t, err, "OTEL_EXPORTER_PROMETHEUS_HOST, _PORT")
}
