package middleware_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
)

// A call that reached nothing is a leaf span that says so, and
// retrace.calls does not count it: the count stays the requests the
// downstream received. Its error keeps its class.
func TestUnsentCallsAreNotCounted(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewVirtual(epoch)
	ended := &policies.Error{Class: policies.Transient, Type: "connection_closed", Err: errors.New("the session has ended")}
	var sent int
	leaf := func(ctx context.Context, req string) (string, error) {
		if a, _ := middleware.AttemptFrom(ctx); a.N == 1 {
			return "", middleware.Unsent(ended) // nothing written
		}
		sent++
		return "ok", nil
	}
	h := middleware.Layer[string, string]("tool", spec(retry(3, time.Second, clk)), tp)(leaf)

	out, err := h(context.Background(), "x")

	require.NoError(t, err)
	assert.Equal(t, "ok", out)
	spans := rec.Ended()
	counts, err := retracetest.TraceCounts(spans)
	require.NoError(t, err)
	assert.Equal(t, int64(sent), counts.Calls, "retrace.calls = the calls that reached the handler's downstream")
	assert.Equal(t, sent, counts.LeafSpans)
	l := layerSpans(rec, "tool")[0]
	assert.Equal(t, int64(1), num(l, telemetry.CallsUncounted))
	attempts := attemptSpans(rec, "tool")
	require.Len(t, attempts, 2)
	assert.Equal(t, telemetry.UncountedUnsent, str(attempts[0], telemetry.Uncounted))
	assert.Equal(t, "transient", str(attempts[0], telemetry.ErrorClass), "Unsent keeps the class")
	assert.Equal(t, "connection_closed", str(attempts[0], semconv.ErrorType))
	_, marked := attr(attempts[1], telemetry.Uncounted)
	assert.False(t, marked)

	assert.Nil(t, middleware.Unsent(nil))
	assert.ErrorIs(t, middleware.Unsent(ended), ended)
	assert.Equal(t, ended.Error(), middleware.Unsent(ended).Error())
}

// A breaker does not count a call that reached nothing: five unsent
// failures in a row leave it closed.
func TestUnsentCallsDoNotOpenABreaker(t *testing.T) {
	_, tp := recorder(t)
	clk := clock.NewVirtual(epoch)
	cb := policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: 2, Delay: time.Minute, Clock: clk})
	var calls int
	h := middleware.Layer[string, string]("tool", spec(cb), tp)(func(context.Context, string) (string, error) {
		calls++
		return "", middleware.Unsent(errOverloaded)
	})
	for range 5 {
		_, err := h(context.Background(), "x")
		require.ErrorIs(t, err, errOverloaded)
	}
	assert.Equal(t, 5, calls, "never refused")

	// Sent failures open it, for contrast.
	sentCB := policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: 2, Delay: time.Minute, Clock: clk})
	calls = 0
	h = middleware.Layer[string, string]("tool", spec(sentCB), tp)(func(context.Context, string) (string, error) {
		calls++
		return "", errOverloaded
	})
	for range 5 {
		_, _ = h(context.Background(), "x")
	}
	assert.Equal(t, 2, calls)
}

// A layer WithUncounted makes leaves that retrace.calls does not count, each
// saying why, counted apart on the root.
func TestUncountedLayer(t *testing.T) {
	rec, tp := recorder(t)
	opts := []middleware.Option{tp}
	handshake := middleware.Layer[string, string]("mcp", middleware.Spec[string]{}, append(opts, middleware.WithUncounted(telemetry.UncountedHandshake))...)(
		func(context.Context, string) (string, error) { return "hello", nil })
	call := middleware.Layer[string, string]("mcp", middleware.Spec[string]{}, opts...)(func(context.Context, string) (string, error) { return "ok", nil })
	root := middleware.Layer[string, string]("task", middleware.Spec[string]{}, opts...)(func(ctx context.Context, req string) (string, error) {
		if _, err := handshake(ctx, req); err != nil {
			return "", err
		}
		if _, err := handshake(ctx, req); err != nil {
			return "", err
		}
		return call(ctx, req)
	})

	_, err := root(context.Background(), "x")

	require.NoError(t, err)
	counts, err := retracetest.TraceCounts(rec.Ended())
	require.NoError(t, err)
	assert.Equal(t, int64(1), counts.Calls)
	assert.Equal(t, 1, counts.LeafSpans)
	task := layerSpans(rec, "task")[0]
	assert.Equal(t, int64(2), num(task, telemetry.CallsUncounted))
	marked := 0
	for _, s := range layerSpans(rec, "mcp") {
		if str(s, telemetry.Uncounted) == telemetry.UncountedHandshake {
			marked++
		}
	}
	assert.Equal(t, 2, marked)
}

// A layer that makes one attempt says a transient failure failed once; it
// exhausted nothing. Over a layer that gave up, it ends as that layer did.
func TestOneAttemptLayerOutcomes(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewVirtual(epoch)
	opts := []middleware.Option{tp}
	leaf, _ := counting(errOverloaded)
	_, err := middleware.Layer[string, string]("http", middleware.Spec[string]{}, opts...)(leaf)(context.Background(), "x")
	require.ErrorIs(t, err, errOverloaded)
	assert.Equal(t, "failed_transient", str(layerSpans(rec, "http")[0], telemetry.Outcome))

	session := middleware.Layer[string, string]("session", spec(retry(2, time.Second, clk)), opts...)(leaf)
	_, err = middleware.Layer[string, string]("agent", middleware.Spec[string]{}, opts...)(session)(context.Background(), "x")
	require.Error(t, err)
	assert.Equal(t, "failed_exhausted", str(layerSpans(rec, "session")[0], telemetry.Outcome))
	assert.Equal(t, "failed_exhausted", str(layerSpans(rec, "agent")[0], telemetry.Outcome), "carried from the layer beneath")
}
