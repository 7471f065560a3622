package middleware_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/instrument"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// meter returns a meter provider with a manual reader, shut down with the
// test, and a function that collects what it recorded.
func meter(t *testing.T) (middleware.Option, func() map[string]metricdata.Metrics) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	return middleware.WithMeterProvider(mp), func() map[string]metricdata.Metrics {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		out := map[string]metricdata.Metrics{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				out[m.Name] = m
			}
		}
		return out
	}
}

// key names a data point by its attributes, "k=v,k=v" in the set's order.
func key(set attribute.Set) string {
	s := ""
	for _, kv := range set.ToSlice() {
		if s != "" {
			s += ","
		}
		s += string(kv.Key) + "=" + kv.Value.String()
	}
	return s
}

func sums(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T", m.Name, m.Data)
	out := map[string]int64{}
	for _, dp := range sum.DataPoints {
		out[key(dp.Attributes)] += dp.Value
	}
	return out
}

type hist struct {
	Count uint64
	Sum   float64
}

func histograms[N int64 | float64](t *testing.T, m metricdata.Metrics) map[string]hist {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[N])
	require.True(t, ok, "%s is a %T", m.Name, m.Data)
	out := map[string]hist{}
	for _, dp := range h.DataPoints {
		out[key(dp.Attributes)] = hist{dp.Count, float64(dp.Sum)}
	}
	return out
}

func TestMetricsCallsAttemptsAndDelays(t *testing.T) {
	mo, collect := meter(t)
	leaf, _ := counting(errOverloaded, nil, errOverloaded)
	h := middleware.Layer[string, string]("tool", spec(retry(2, time.Second, clock.NewVirtual(epoch))), mo)(leaf)
	_, err := h(context.Background(), "a") // fails, then succeeds after 1 s
	require.NoError(t, err)
	_, err = h(context.Background(), "b") // fails twice, 1 s between
	require.Error(t, err)

	got := collect()
	assert.Equal(t, map[string]int64{
		"retrace.layer=tool,retrace.outcome=success_after_retry": 1,
		"retrace.layer=tool,retrace.outcome=failed_exhausted":    1,
	}, sums(t, got[telemetry.MetricLayerCalls]))
	assert.Equal(t, map[string]hist{"retrace.layer=tool": {Count: 2, Sum: 4}},
		histograms[int64](t, got[telemetry.MetricLayerAttempts]), "one data point per call: 2 attempts each")
	assert.Equal(t, map[string]hist{"retrace.layer=tool": {Count: 2, Sum: 2}},
		histograms[float64](t, got[telemetry.MetricRetryDelay]), "two retries after 1 s each, in seconds")
	assert.Equal(t, "s", got[telemetry.MetricRetryDelay].Unit)
}

// A layer that does not retry counts its calls but records no attempts.
func TestMetricsNonRetryingLayerHasNoAttempts(t *testing.T) {
	mo, collect := meter(t)
	leaf, _ := counting(nil)
	h := middleware.Layer[string, string]("model", middleware.Spec[string]{}, mo)(leaf)
	_, err := h(context.Background(), "a")
	require.NoError(t, err)
	got := collect()
	assert.Equal(t, map[string]int64{"retrace.layer=model,retrace.outcome=success": 1}, sums(t, got[telemetry.MetricLayerCalls]))
	_, ok := got[telemetry.MetricLayerAttempts]
	assert.False(t, ok)
}

// The breaker's state and transitions: closed → open after 5 failures,
// half open after the cool-down, closed after a good probe. Two layers that
// share the breaker count each transition once.
func TestMetricsCircuitStateAndTransitions(t *testing.T) {
	mo, collect := meter(t)
	clk := clock.NewFake(epoch)
	breaker := policies.NewCircuitBreaker[string](policies.BreakerConfig{Name: "search_docs", Clock: clk})
	fail := true
	leaf := func(context.Context, string) (string, error) {
		if fail {
			return "", &policies.Error{StatusCode: 429, Code: "rate_limit_exceeded"}
		}
		return "found", nil
	}
	a := middleware.Layer[string, string]("tool", spec(breaker), mo)(leaf)
	b := middleware.Layer[string, string]("tool2", spec(breaker), mo)(leaf)
	ctx := context.Background()

	state := func() map[string]int64 {
		g, ok := collect()[telemetry.MetricCircuitState].Data.(metricdata.Gauge[int64])
		require.True(t, ok)
		out := map[string]int64{}
		for _, dp := range g.DataPoints {
			out[key(dp.Attributes)] = dp.Value
		}
		return out
	}
	assert.Equal(t, map[string]int64{"retrace.circuit.name=search_docs,retrace.circuit.state=closed": 1}, state())

	for i := range 5 {
		h := a
		if i%2 == 1 {
			h = b
		}
		_, _ = h(ctx, "q")
	}
	_, err := a(ctx, "q")
	require.Error(t, err)
	assert.Equal(t, map[string]int64{
		"retrace.circuit.name=search_docs,retrace.circuit.state=closed": 0,
		"retrace.circuit.name=search_docs,retrace.circuit.state=open":   1,
	}, state())

	clk.Advance(60 * time.Second)
	fail = false
	_, err = b(ctx, "q")
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{
		"retrace.circuit.name=search_docs,retrace.circuit.state=closed":    1,
		"retrace.circuit.name=search_docs,retrace.circuit.state=open":      0,
		"retrace.circuit.name=search_docs,retrace.circuit.state=half_open": 0,
	}, state())
	got := collect()
	assert.Equal(t, map[string]int64{
		"retrace.circuit.name=search_docs,retrace.circuit.state=open":      1,
		"retrace.circuit.name=search_docs,retrace.circuit.state=half_open": 1,
		"retrace.circuit.name=search_docs,retrace.circuit.state=closed":    1,
	}, sums(t, got[telemetry.MetricCircuitTransitions]))
	assert.Equal(t, int64(1), sums(t, got[telemetry.MetricLayerCalls])["retrace.layer=tool,retrace.outcome=rejected"])
}

// Each retry the task budget refuses is counted once, on the layer it
// stopped, under retrace's retry and failsafe-go's alike.
func TestMetricsBudgetRefusals(t *testing.T) {
	mo, collect := meter(t)
	clk := clock.NewVirtual(epoch)
	leaf, _ := counting(errOverloaded)
	own := middleware.Layer[string, string]("own", spec(retry(3, time.Second, clk)), mo, middleware.WithClock(clk))(leaf)
	plain := middleware.Layer[string, string]("plain", spec(retrypolicy.NewBuilder[string]().WithMaxAttempts(3).Build()), mo, middleware.WithClock(clk))(leaf)
	ctx := policies.WithTaskBudget(context.Background(), 2)
	_, _ = own(ctx, "a")   // draws both retries
	_, _ = own(ctx, "b")   // refused at its first retry
	_, _ = plain(ctx, "c") // refused at its first retry
	got := collect()
	assert.Equal(t, map[string]int64{"retrace.layer=own": 1, "retrace.layer=plain": 1}, sums(t, got[telemetry.MetricBudgetRefusals]))
}

// A GenAI layer records the conventions' duration and token usage, with
// error.type on failure and no tokens then; an answer that says nothing of
// its usage (ok false) records its duration and no tokens, whatever counts
// its reader returned beside.
func TestMetricsGenAI(t *testing.T) {
	mo, collect := meter(t)
	type reply struct {
		in, out  int
		reported bool
	}
	next := reply{in: 120, out: 30, reported: true}
	fail := false
	h := middleware.Layer[string, reply]("model", middleware.Spec[reply]{
		GenAIMetrics: func(r reply) (int, int, bool) { return r.in, r.out, r.reported },
	}, mo, middleware.WithAttributes(semconv.GenAIOperation.String("chat"), semconv.GenAIProvider.String("openai"), semconv.GenAIRequestModel.
		String("gpt-4o-mini"), semconv.GenAIToolName.String("not a metric attribute")),
	)(func(context.Context, string) (reply, error) {
		if fail {
			return reply{}, errOverloaded
		}
		return next, nil
	})
	_, err := h(context.Background(), "a")
	require.NoError(t, err)
	next = reply{in: 999, out: 999}
	_, err = h(context.Background(), "b")
	require.NoError(t, err)
	fail = true
	_, err = h(context.Background(), "c")
	require.Error(t, err)

	got := collect()
	base := "gen_ai.operation.name=chat,gen_ai.provider.name=openai,gen_ai.request.model=gpt-4o-mini"
	d := histograms[float64](t, got[telemetry.MetricOperationDuration])
	assert.Len(t, d, 2)
	assert.Equal(t, uint64(2), d[base].Count)
	assert.Equal(t, uint64(1), d["error.type=overloaded_error,"+base].Count)
	assert.Equal(t, instrument.DurationBuckets(), got[telemetry.MetricOperationDuration].Data.(metricdata.Histogram[float64]).DataPoints[0].Bounds)
	tokens := histograms[int64](t, got[telemetry.MetricTokenUsage])
	assert.Equal(t, map[string]hist{
		base + ",gen_ai.token.type=input":  {1, 120},
		base + ",gen_ai.token.type=output": {1, 30},
	}, tokens)
	assert.Equal(t, "{token}", got[telemetry.MetricTokenUsage].Unit)
}

// error.type on the GenAI duration comes from a closed set: 10,000 codes a
// provider invents make one _OTHER stream, not 10,000; the known ones and
// the HTTP statuses keep their names.
func TestGenAIErrorTypeBounded(t *testing.T) {
	mp, collect := meter(t)
	n := 0
	call := middleware.Layer[string, string]("session", middleware.Spec[string]{
		GenAIMetrics: func(string) (int, int, bool) { return 0, 0, false },
	}, mp)(func(context.Context, string) (string, error) {
		n++
		switch n {
		case 1:
			return "", &policies.Error{StatusCode: 429, Code: "insufficient_quota"}
		case 2:
			return "", &policies.Error{StatusCode: 503}
		}
		return "", &policies.Error{StatusCode: 400, Code: fmt.Sprintf("invented_code_%d", n)}
	})
	for range 10_000 {
		_, _ = call(context.Background(), "x")
	}
	h, ok := collect()[telemetry.MetricOperationDuration].Data.(metricdata.Histogram[float64])
	require.True(t, ok)
	types := map[string]uint64{}
	for _, dp := range h.DataPoints {
		v, _ := dp.Attributes.Value(semconv.ErrorType)
		types[v.AsString()] += dp.Count
	}
	assert.Equal(t, map[string]uint64{"insufficient_quota": 1, "503": 1, "_OTHER": 9_998}, types)
}
