package telemetry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRecordFailure(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	_, span := tp.Tracer("t").Start(context.Background(), "attempt")
	err := errors.New("401 invalid_api_key: Incorrect API key provided: sk-proj-0123456789abcdef")
	telemetry.RecordFailure(span, policies.Classification{Class: policies.Permanent, Type: "invalid_api_key", Reason: "http 401", RetryAfter: 2 * time.Second}, err)
	span.End()

	s := rec.Ended()[0]
	assert.Equal(t, codes.Error, s.Status().Code)
	assert.Equal(t, "401 invalid_api_key: Incorrect API key provided: sk-[REDACTED]", s.Status().Description)
	assert.ElementsMatch(t, []any{"permanent", "invalid_api_key", int64(2000)}, []any{
		value(s, telemetry.ErrorClass), value(s, telemetry.ErrorType), value(s, telemetry.RetryAfterMs),
	})
}

func value(s sdktrace.ReadOnlySpan, k attribute.Key) any {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.AsInterface()
		}
	}
	return nil
}

func TestCircuitStateValue(t *testing.T) {
	assert.Equal(t, "half_open", telemetry.CircuitStateValue("half-open"))
	assert.Equal(t, "open", telemetry.CircuitStateValue("open"))
}
