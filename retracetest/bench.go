package retracetest

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchTracerProvider returns a tracer provider for benchmarks: it samples
// every span and exports each batch to nowhere. A traced call then pays
// what the OpenTelemetry SDK costs it in production (recording every span,
// its attributes and events, and queueing it for the batch exporter) but
// not the exporter's I/O, which is the same with retrace or without and
// would only add noise to a comparison. Give the same provider to each
// variant of a benchmark, retrace's and a hand-made one, so that both pay
// the same SDK; call Shutdown when done, which stops the batcher's
// goroutine.
func BenchTracerProvider() *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(discard{}),
	)
}

// discard is an exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
