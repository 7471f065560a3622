package middleware

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/instrument"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// genAI is what makes a layer a GenAI model call, whatever its role: the
// attributes its span learns from the result as it ends
// (Spec.EndAttributes: the usage, response model and finish reasons of the
// attempt that ended it) and the token usage its gen_ai.client.* metrics
// read (Spec.GenAIMetrics).
type genAI[Resp any] struct {
	end   func(Resp, error) []attribute.KeyValue  // nil: none
	usage func(Resp) (input, output int, ok bool) // nil: no GenAI metrics
}

// newGenAI is the GenAI part of a layer of spec, nil when it is no GenAI
// call.
func newGenAI[Resp any](spec Spec[Resp]) *genAI[Resp] {
	if spec.EndAttributes == nil && spec.GenAIMetrics == nil {
		return nil
	}
	return &genAI[Resp]{end: spec.EndAttributes, usage: spec.GenAIMetrics}
}

// metrics reports whether the layer records the GenAI client metrics.
func (g *genAI[Resp]) metrics() bool { return g != nil && g.usage != nil }

// endAttributes sets the attributes read off the call's result on span.
// The answer's words (its model, its ID) may echo a credential: a value
// that is a secret, or holds one, is written as [REDACTED] whole
// (redact.Value's rule).
func (g *genAI[Resp]) endAttributes(span trace.Span, known []string, resp Resp, err error) {
	if g.end == nil {
		return
	}
	attrs := g.end(resp, err)
	for i, kv := range attrs {
		switch kv.Value.Type() {
		case attribute.STRING:
			if v := kv.Value.AsString(); v != "" {
				if redact.IsSecret(v, known) {
					attrs[i] = kv.Key.String(redact.Redacted)
				}
			}
		case attribute.STRINGSLICE:
			vs, changed := kv.Value.AsStringSlice(), false
			for j, v := range vs {
				if redact.IsSecret(v, known) {
					vs[j], changed = redact.Redacted, true
				}
			}
			if changed {
				attrs[i] = kv.Key.StringSlice(vs)
			}
		}
	}
	span.SetAttributes(attrs...)
}

// record records the call on the GenAI instruments in: its duration d, and
// the tokens of a successful answer.
func (g *genAI[Resp]) record(ctx context.Context, in *genAIInstruments, d time.Duration, resp Resp, err error, cls policies.Classification) {
	var input, output int
	if err == nil {
		if i, o, ok := g.usage(resp); ok {
			input, output = i, o
		}
	}
	in.record(ctx, d, cls.Type, err != nil, input, output)
}

// genAIInstruments are the GenAI client metrics of a model layer.
type genAIInstruments struct {
	duration metric.Float64Histogram
	tokens   metric.Int64Histogram
	base     []attribute.KeyValue
	ok       []metric.RecordOption
	input    []metric.RecordOption
	output   []metric.RecordOption
	failed   sync.Map // error.type → []metric.RecordOption
}

// genAIKeys are the layer attributes the GenAI metrics carry: the
// conventions' low-cardinality ones.
var genAIKeys = []attribute.Key{semconv.GenAIOperation, semconv.GenAIProvider, semconv.GenAIRequestModel, semconv.ServerAddress}

func newGenAIInstruments(m metric.Meter, attrs []attribute.KeyValue) *genAIInstruments {
	g := &genAIInstruments{}
	for _, kv := range attrs {
		for _, k := range genAIKeys {
			if kv.Key == k {
				g.base = append(g.base, kv)
			}
		}
	}
	g.duration, _ = m.Float64Histogram(telemetry.MetricOperationDuration, metric.WithUnit(instrument.UnitSeconds),
		metric.WithDescription("GenAI operation duration."),
		metric.WithExplicitBucketBoundaries(instrument.DurationBuckets()...))
	g.tokens, _ = m.Int64Histogram(telemetry.MetricTokenUsage, metric.WithUnit(instrument.UnitToken),
		metric.WithDescription("Measures number of input and output tokens used."),
		metric.WithExplicitBucketBoundaries(instrument.TokenBuckets()...))
	with := func(kv ...attribute.KeyValue) []metric.RecordOption {
		return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue{}, g.base...), kv...)...))}
	}
	g.ok = with()
	g.input = with(semconv.TokenType.String(semconv.TokenInput))
	g.output = with(semconv.TokenType.String(semconv.TokenOutput))
	return g
}

// record records one model call: its duration, with error.type when it
// failed, and the tokens it used when it succeeded.
func (g *genAIInstruments) record(ctx context.Context, d time.Duration, errType string, failed bool, input, output int) {
	opts := g.ok
	if failed {
		// A span names the provider's code as it is; a metric only the
		// known ones, so that its streams stay bounded.
		errType = instrument.MetricErrorType(errType)
		v, ok := g.failed.Load(errType)
		if !ok {
			v, _ = g.failed.LoadOrStore(errType, []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
				append(append([]attribute.KeyValue{}, g.base...), semconv.ErrorType.String(errType))...))})
		}
		opts = v.([]metric.RecordOption)
	}
	if g.duration != nil {
		g.duration.Record(ctx, d.Seconds(), opts...)
	}
	if failed || g.tokens == nil {
		return
	}
	// A provider that reports no usage leaves the histogram alone rather
	// than filling it with zeros.
	if input > 0 {
		g.tokens.Record(ctx, int64(input), g.input...)
	}
	if output > 0 {
		g.tokens.Record(ctx, int64(output), g.output...)
	}
}
