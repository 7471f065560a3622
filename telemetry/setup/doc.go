// Package setup builds OpenTelemetry tracing and metrics for programs that
// use retrace: the one retrace package that imports the OTel SDK.
//
// [Tracing] and [Metrics] read the standard OTEL_* variables (see [ReadEnv]):
//
//   - OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER: otlp, console, none,
//     prometheus (metrics), or a name registered with autoexport
//     (go.opentelemetry.io/contrib/exporters/autoexport). console is
//     retrace's own: each finished trace as a tree, and a summary of the
//     metrics at shutdown, on stderr ([WithConsole]).
//   - OTEL_EXPORTER_PROMETHEUS_HOST and _PORT (localhost, 9464): where
//     prometheus serves the metrics for scraping, at /metrics, from the
//     moment the provider is built until its shutdown, which stops the
//     server and its goroutine. It answers Prometheus in OpenMetrics, with
//     exemplars: a counter's or a histogram bucket's sample made inside a
//     sampled span carries that span's trace_id and span_id, so a panel
//     links to the trace (OTEL_METRICS_EXEMPLAR_FILTER=always_off turns
//     them off). Metric names follow the OTel-to-Prometheus translation:
//     dots become underscores, a unit in seconds adds _seconds, a counter
//     _total (retrace.layer.calls is retrace_layer_calls_total,
//     retrace.retry.delay is retrace_retry_delay_seconds).
//   - OTEL_EXPORTER_OTLP_PROTOCOL (and _TRACES_ / _METRICS_PROTOCOL): grpc or
//     http/protobuf, the default.
//   - OTEL_EXPORTER_OTLP_ENDPOINT (and _TRACES_ / _METRICS_ENDPOINT): a URL,
//     "http://localhost:4318", or host:port, "localhost:4317", which is
//     insecure gRPC unless the protocol says otherwise.
//   - OTEL_EXPORTER_OTLP_HEADERS: sent with every export, never printed.
//
// With none of these set, a program prints its trees (the specification's
// default, otlp, would send them to a receiver on localhost that nobody
// started); any OTLP endpoint or protocol variable makes otlp the default.
//
//	shutdown, err := setup.Tracing(ctx)
//	if err != nil { … }
//	defer shutdown(context.Background()) // flushes; gives up after 5 s
//
// Metrics for Prometheus to scrape, at http://127.0.0.1:9464/metrics:
//
//	// OTEL_METRICS_EXPORTER=prometheus OTEL_EXPORTER_PROMETHEUS_HOST=127.0.0.1
//	mshutdown, err := setup.Metrics(ctx)
//	if err != nil { … }
//	defer mshutdown(context.Background()) // stops the endpoint
package setup
