// Package setup builds OpenTelemetry tracing for programs that use retrace:
// the one retrace package that imports the OTel SDK.
//
// [Tracing] reads the standard OTEL_* variables: with
// OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT set it exports over OTLP gRPC (an
// endpoint written without a scheme, "localhost:4317", is insecure gRPC), with
// OTEL_TRACES_EXPORTER=console or no endpoint it prints each finished trace as
// a tree on stderr, and with OTEL_TRACES_EXPORTER=none it records nothing.
//
//	shutdown, err := setup.Tracing(ctx)
//	if err != nil { … }
//	defer shutdown(context.Background()) // flushes; gives up after 5 s
package setup
