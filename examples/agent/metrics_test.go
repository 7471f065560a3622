package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/retrace-go/retrace/telemetry"
)

// figures are a metric's data points by their attributes ("k=v,k=v"): a
// sum's or gauge's value, a histogram's count and sum.
type figures map[string][2]float64

func collectMetrics(t *testing.T, reader *sdkmetric.ManualReader) map[string]figures {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]figures{}
	key := func(s attribute.Set) string {
		var parts []string
		for _, kv := range s.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.String())
		}
		return strings.Join(parts, ",")
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			f := figures{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					f[key(p.Attributes)] = [2]float64{float64(p.Value)}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					f[key(p.Attributes)] = [2]float64{float64(p.Value)}
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					f[key(p.Attributes)] = [2]float64{float64(p.Count), float64(p.Sum)}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					f[key(p.Attributes)] = [2]float64{float64(p.Count), p.Sum}
				}
			}
			out[m.Name] = f
		}
	}
	return out
}

// scenarioMetrics runs one scenario in a demo of its own and returns its
// metrics as an in-memory reader saw them.
func scenarioMetrics(t *testing.T, name string) map[string]figures {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	d, err := newDemo(context.Background(), options{timeScale: 0.0001, model: "gpt-4o-mini", metricReader: reader}, noEnv, &bytes.Buffer{})
	require.NoError(t, err)
	defer d.close()
	for _, sc := range scenarios() {
		if sc.name == name {
			res, err := d.scenario(context.Background(), sc)
			require.NoError(t, err)
			require.Empty(t, res.Problems)
			return collectMetrics(t, reader)
		}
	}
	t.Fatalf("no scenario %s", name)
	return nil
}

// count adds up the first figure of the points whose attributes hold all of parts.
func count(f figures, parts ...string) float64 {
	n := 0.0
	for k, v := range f {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(k, p)
		}
		if all {
			n += v[0]
		}
	}
	return n
}

const chat = "gen_ai.operation.name=chat,gen_ai.provider.name=openai,gen_ai.request.model=gpt-4o-mini"

func TestMetricsAfterAlways503(t *testing.T) {
	m := scenarioMetrics(t, "always-503")
	calls := m[telemetry.MetricLayerCalls]
	assert.Equal(t, 1.0, calls["retrace.layer=runtime,retrace.outcome=failed_exhausted"][0])
	assert.Equal(t, 3.0, calls["retrace.layer=session,retrace.outcome=failed_exhausted"][0])
	assert.Equal(t, figures{
		"retrace.layer=runtime": {1, 3},  // one exec of 3 attempts
		"retrace.layer=session": {3, 12}, // three runs of 4 attempts
	}, m[telemetry.MetricLayerAttempts])
	assert.Equal(t, figures{
		"retrace.layer=runtime": {2, 4.5}, // 1.5 s + 3 s, the configured delays
		"retrace.layer=session": {9, 42},  // (2 s + 4 s + 8 s) × 3
	}, m[telemetry.MetricRetryDelay])
	d := m[telemetry.MetricOperationDuration]
	assert.Equal(t, 3.0, count(d, "error.type=server_error", chat), "one per chat operation (the inference span), all failed")
	assert.Len(t, d, 1)
	_, tokens := m[telemetry.MetricTokenUsage]
	assert.False(t, tokens, "no call succeeded: no tokens")
}

// The hidden layer's 36 requests are 3 chat operations: the conventions'
// duration counts what the application asked for.
func TestMetricsAfterHiddenLayer(t *testing.T) {
	m := scenarioMetrics(t, "hidden-layer")
	assert.Equal(t, 3.0, count(m[telemetry.MetricOperationDuration], "error.type=server_error", chat))
	assert.Equal(t, figures{"retrace.layer=runtime": {1, 3}, "retrace.layer=session": {3, 12}}, m[telemetry.MetricLayerAttempts])
}

// The incident: search_docs's breaker opens once and refuses the next call;
// the model calls that succeed report their tokens.
func TestMetricsAfterIncident(t *testing.T) {
	m := scenarioMetrics(t, "incident")
	assert.Equal(t, figures{"retrace.circuit.name=search_docs,retrace.circuit.state=open": {1, 0}},
		m[telemetry.MetricCircuitTransitions], "the governed run's breaker opened once; the naive run has none")
	state := m[telemetry.MetricCircuitState]
	assert.Equal(t, 1.0, state["retrace.circuit.name=search_docs,retrace.circuit.state=open"][0], "still open when the run ended")
	assert.Equal(t, 0.0, state["retrace.circuit.name=search_docs,retrace.circuit.state=closed"][0])
	assert.Equal(t, 1.0, m[telemetry.MetricLayerCalls]["retrace.layer=tool,retrace.outcome=rejected"][0])
	_, refused := m[telemetry.MetricBudgetRefusals]
	assert.False(t, refused, "the task budget was never spent")
	ok := 0.0
	for k, v := range m[telemetry.MetricOperationDuration] {
		if strings.Contains(k, chat) && !strings.Contains(k, "error.type") {
			ok += v[0]
		}
	}
	assert.Positive(t, ok)
	tokens := m[telemetry.MetricTokenUsage]
	assert.Equal(t, ok, count(tokens, chat, "gen_ai.token.type=input"), "every chat operation that succeeded reports its input tokens")
	assert.Equal(t, ok, count(tokens, chat, "gen_ai.token.type=output"))
}
