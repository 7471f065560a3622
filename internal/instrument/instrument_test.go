package instrument_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/internal/instrument"
	"github.com/retrace-go/retrace/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A metric keeps the error types it knows and the HTTP statuses, and folds
// every other into the conventions' _OTHER, so that its streams stay
// bounded.
func TestMetricErrorType(t *testing.T) {
	for in, want := range map[string]string{
		"rate_limit_exceeded": "rate_limit_exceeded",
		"overloaded_error":    "overloaded_error",
		"context.Canceled":    "context.Canceled",
		"429":                 "429",
		"599":                 "599",
		"600":                 telemetry.ErrorTypeOther,
		"099":                 telemetry.ErrorTypeOther,
		"a_code_invented_now": telemetry.ErrorTypeOther,
		"":                    telemetry.ErrorTypeOther,
	} {
		assert.Equal(t, want, instrument.MetricErrorType(in), in)
	}
}

// Each call returns a fresh slice: an instrument that keeps one cannot
// change another's boundaries.
func TestBucketsAreFresh(t *testing.T) {
	for _, buckets := range []func() []float64{instrument.DurationBuckets, instrument.TokenBuckets, instrument.AttemptBuckets, instrument.RetryDelayBuckets} {
		a := buckets()
		a[0] = -1
		assert.NotEqual(t, a[0], buckets()[0])
	}
}

// A layer span's limit is its retrace.max_attempts; the outermost span of
// a retrying layer that leaves it out, because its worst case equals it,
// states it as retrace.calls.worst_case; a span of a layer that does not
// retry, or whose limit is unknown, states none.
func TestMaxAttempts(t *testing.T) {
	attrs := func(kvs ...attribute.KeyValue) map[attribute.Key]attribute.Value {
		m := map[attribute.Key]attribute.Value{}
		for _, kv := range kvs {
			m[kv.Key] = kv.Value
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		attrs map[attribute.Key]attribute.Value
		want  int64
		ok    bool
	}{
		{"stated", attrs(telemetry.MaxAttempts.Int(4), telemetry.Attempts.Int(1), telemetry.RetryDepth.Int(1)), 4, true},
		{"stated beside a worst case", attrs(telemetry.MaxAttempts.Int(2), telemetry.Attempts.Int(1), telemetry.Calls.Int(1), telemetry.CallsWorstCase.Int(8)), 2, true},
		{"the outermost, by its worst case", attrs(telemetry.Attempts.Int(3), telemetry.Calls.Int(3), telemetry.CallsWorstCase.Int(3)), 3, true},
		{"the outermost of a layer that does not retry", attrs(telemetry.Calls.Int(1), telemetry.CallsWorstCase.Int(12)), 0, false},
		{"unknown: a failsafe-go retry policy's", attrs(telemetry.Attempts.Int(2), telemetry.Calls.Int(2)), 0, false},
		{"a nested layer without one", attrs(telemetry.Attempts.Int(2), telemetry.RetryDepth.Int(1)), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := instrument.MaxAttempts(tc.attrs)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}
