// Package setup builds OpenTelemetry tracing and metrics for programs that
// use retrace: the one retrace package that imports the OTel SDK.
//
// [Tracing] and [Metrics] read the standard OTEL_* variables (see [ReadEnv]):
//
//   - OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER: otlp, console, none, or a
//     name autoexport (go.opentelemetry.io/contrib/exporters/autoexport)
//     builds, such as prometheus for metrics. console is retrace's own: each
//     finished trace as a tree, and a summary of the metrics at shutdown, on
//     stderr ([WithConsole]).
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
package setup
