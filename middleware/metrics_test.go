package middleware_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/telemetry"
)

func TestMetricsCountCallsAndAttempts(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	leaf, _ := counting(errOverloaded, nil, errOverloaded)
	h := middleware.PoliciesWith[string, string]("tool", []middleware.Option{middleware.WithMeterProvider(mp)},
		retry(2, time.Second, clock.NewVirtual(epoch)))(leaf)
	_, err := h(context.Background(), "a") // fails, then succeeds
	require.NoError(t, err)
	_, err = h(context.Background(), "b") // fails twice
	require.Error(t, err)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	calls := map[string]int64{}
	var attempts int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(t, ok)
			for _, dp := range sum.DataPoints {
				layer, _ := dp.Attributes.Value(telemetry.Layer)
				assert.Equal(t, "tool", layer.AsString())
				switch m.Name {
				case "retrace.layer.calls":
					o, _ := dp.Attributes.Value(attribute.Key(telemetry.Outcome))
					calls[o.AsString()] += dp.Value
				case "retrace.layer.attempts":
					attempts += dp.Value
				}
			}
		}
	}
	assert.Equal(t, map[string]int64{"success_after_retry": 1, "failed_exhausted": 1}, calls)
	assert.Equal(t, int64(4), attempts)
}
