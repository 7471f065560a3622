package instrument_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
