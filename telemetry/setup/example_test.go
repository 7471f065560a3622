package setup_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// What the OTEL_* variables of a few usual setups ask for: Jaeger's OTLP
// ports, written with and without a scheme, and a hosted OTLP/HTTP gateway
// whose base URL has a path.
func ExampleReadEnv() {
	for _, vars := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4317"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otlp-gateway.example.net/otlp", "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Basic%20…"},
		{"OTEL_TRACES_EXPORTER": "otlp"},
		{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4317"},
		{},
	} {
		x, err := setup.ReadEnv(func(k string) string { return vars[k] })
		switch {
		case err != nil:
			fmt.Println(err)
		case x.OTLP && x.Protocol == setup.ProtocolGRPC:
			fmt.Println("grpc", x.Endpoint, "insecure:", x.Insecure)
		case x.OTLP:
			fmt.Println(x.Protocol, x.URL)
		case x.Console:
			fmt.Println("console")
		case x.None:
			fmt.Println("none")
		}
	}
	// Output:
	// grpc localhost:4317 insecure: true
	// http/protobuf http://localhost:4318/v1/traces
	// grpc localhost:4317 insecure: true
	// http/protobuf https://otlp-gateway.example.net/otlp/v1/traces
	// http/protobuf http://localhost:4318/v1/traces
	// none
	// console
}

// A provider that exports nothing (OTEL_TRACES_EXPORTER=none) still hands
// its spans to a processor of the program's own, here a recorder.
func ExampleNewTracerProvider() {
	vars := map[string]string{"OTEL_TRACES_EXPORTER": "none"}
	rec := tracetest.NewSpanRecorder()
	tp, shutdown, err := setup.NewTracerProvider(context.Background(),
		setup.WithEnv(func(k string) string { return vars[k] }), setup.WithSpanProcessor(rec))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, root := tp.Tracer("example").Start(context.Background(), "runtime")
	_, attempt := tp.Tracer("example").Start(ctx, "runtime attempt")
	attempt.End()
	root.End()
	if err := shutdown(context.Background()); err != nil {
		fmt.Println(err)
	}
	for _, s := range rec.Ended() {
		fmt.Println(s.Name())
	}
	// Output:
	// runtime attempt
	// runtime
}

// The console exporter's tree (OTEL_TRACES_EXPORTER=console, or no OTel
// configuration at all), drawn here from fixed spans.
func ExampleWriteTree() {
	tid := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	span := func(id, parent byte, name string, from, to time.Duration, attrs ...attribute.KeyValue) tracetest.SpanStub {
		s := tracetest.SpanStub{
			Name:        name,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{id}}),
			StartTime:   start.Add(from),
			EndTime:     start.Add(to),
			Attributes:  attrs,
		}
		if parent != 0 {
			s.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{parent}})
		}
		return s
	}
	failed := sdktrace.Status{Code: codes.Error, Description: "Service unavailable"}
	transient := []attribute.KeyValue{telemetry.ErrorClass.String("transient"), attribute.String("error.type", "server_error")}
	stubs := tracetest.SpanStubs{
		span(1, 0, "runtime", 0, 2150*time.Millisecond, append(transient,
			telemetry.Outcome.String("failed_exhausted"), telemetry.Attempts.Int(2), telemetry.Calls.Int(2), telemetry.CallsWorstCase.Int(2),
			telemetry.Diagnosis.String("failed after 2 attempts: 503 server_error: Service unavailable"))...),
		span(2, 1, "runtime attempt", 0, 120*time.Millisecond, append(transient, telemetry.Attempt.Int(1))...),
		span(3, 1, "runtime attempt", 2120*time.Millisecond, 2150*time.Millisecond, append(transient, telemetry.Attempt.Int(2), telemetry.RetryDelayMs.Int(2000))...),
	}
	for i := range stubs {
		stubs[i].Status = failed
	}
	if err := setup.WriteTree(os.Stdout, stubs.Snapshots()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// trace 4bf92f3577b34da6a3ce929d0e0e4736
	// runtime  2.15s  outcome=failed_exhausted attempts=2/2  calls=2  calls.worst_case=2  ✗ transient server_error
	// │ failed after 2 attempts: 503 server_error: Service unavailable
	// ├─ runtime attempt  120ms  attempt=1  ✗ transient server_error: Service unavailable
	// └─ runtime attempt  30ms  attempt=2 after=2s  ✗ transient server_error: Service unavailable
}

// The console form of metrics (OTEL_METRICS_EXPORTER=console, or no OTel
// configuration at all): a summary printed at shutdown.
func ExampleNewMeterProvider() {
	vars := map[string]string{"OTEL_METRICS_EXPORTER": "console"}
	mp, shutdown, err := setup.NewMeterProvider(context.Background(),
		setup.WithEnv(func(k string) string { return vars[k] }), setup.WithConsole(os.Stdout))
	if err != nil {
		fmt.Println(err)
		return
	}
	calls, _ := mp.Meter("example").Int64Counter("retrace.layer.calls", metric.WithUnit("{call}"))
	calls.Add(context.Background(), 3, metric.WithAttributes(telemetry.Layer.String("session"), telemetry.Outcome.String("failed_transient")))
	calls.Add(context.Background(), 1, metric.WithAttributes(telemetry.Layer.String("session"), telemetry.Outcome.String("success")))
	if err := shutdown(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// metrics
	//   retrace.layer.calls ({call})
	//     layer=session outcome=failed_transient  3
	//     layer=session outcome=success           1
}

// Metrics for Prometheus to scrape: OTEL_METRICS_EXPORTER=prometheus serves
// them at /metrics, here on a free port of 127.0.0.1, until shutdown.
// retrace.layer.calls is scraped as retrace_layer_calls_total.
func ExampleNewMeterProvider_prometheus() {
	vars := map[string]string{
		"OTEL_METRICS_EXPORTER":         "prometheus",
		"OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
		"OTEL_EXPORTER_PROMETHEUS_PORT": "0", // any free port; WithPrometheusURL tells which
	}
	var url string
	mp, shutdown, err := setup.NewMeterProvider(context.Background(),
		setup.WithEnv(func(k string) string { return vars[k] }),
		setup.WithPrometheusURL(func(u string) { url = u }))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = shutdown(context.Background()) }() // stops the endpoint

	calls, _ := mp.Meter("example").Int64Counter(telemetry.MetricLayerCalls)
	calls.Add(context.Background(), 1, metric.WithAttributes(telemetry.Layer.String("runtime"), telemetry.Outcome.String("failed_exhausted")))

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "retrace_layer_calls_total{") {
			fmt.Println(regexp.MustCompile(`otel_scope_[a-z_]+="[^"]*",`).ReplaceAllString(sc.Text(), ""))
		}
	}
	// Output:
	// retrace_layer_calls_total{retrace_layer="runtime",retrace_outcome="failed_exhausted"} 1
}
