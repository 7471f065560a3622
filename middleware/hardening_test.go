package middleware_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// nilErr is an error type whose Error method dereferences its receiver: a
// handler that returns a nil *nilErr as its error makes every Error() call
// panic.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// A panicking classifier rule, a nil typed error whose Error panics, and a
// panicking OnStateChange: none escapes a layer, and every permit (the
// bulkhead's slot, the half-open probe) is released.
func TestNoPanicEscapesALayer(t *testing.T) {
	clk := clock.NewFake(epoch)
	panicky := policies.NewClassifier(func(err error) (policies.Classification, bool) { panic("rule bug") })
	var changes int
	cb := policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: 1, Delay: time.Second,
		OnStateChange: func(from, to circuitbreaker.State) { changes++; panic("callback bug") }})
	bh := policies.NewBulkhead[string](1, 0)

	for name, tc := range map[string]struct {
		opts []middleware.Option
		err  error
	}{
		"classifier rule": {[]middleware.Option{middleware.WithClassifier(panicky), middleware.WithClock(clk)}, errOverloaded},
		"nil typed error": {[]middleware.Option{middleware.WithClock(clk)}, (*nilErr)(nil)},
	} {
		t.Run(name, func(t *testing.T) {
			leaf, _ := counting(tc.err)
			h := middleware.Layer[string, string]("tool", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 2}), bh), tc.opts...)(leaf)
			var err error
			require.NotPanics(t, func() { _, err = h(context.Background(), "x") })
			require.Error(t, err)
			require.NotPanics(t, func() { _ = err.Error() })
			// The bulkhead's one slot was released: another call gets it.
			ok := middleware.Layer[string, string]("tool", spec(bh))(func(context.Context, string) (string, error) { return "ok", nil })
			out, err := ok(context.Background(), "y")
			require.NoError(t, err, "the slot leaked")
			assert.Equal(t, "ok", out)
		})
	}

	t.Run("OnStateChange", func(t *testing.T) {
		leaf, calls := counting(errOverloaded, nil)
		h := middleware.Layer[string, string]("tool", spec(cb), middleware.WithClock(clk))(leaf)
		require.NotPanics(t, func() { _, _ = h(context.Background(), "x") })
		assert.True(t, cb.IsOpen(), "opened despite the callback's panic")
		clk.Advance(time.Second)
		var err error
		require.NotPanics(t, func() { _, err = h(context.Background(), "x") })
		require.NoError(t, err, "the probe went through")
		assert.True(t, cb.IsClosed(), "not stuck half open")
		assert.Equal(t, int64(2), calls.Load())
		assert.Equal(t, 3, changes, "closed→open, open→half-open, half-open→closed")
	})
}

// A cancellation right after a failed attempt is class canceled, and
// errors.Is sees context.Canceled, whatever the attempt returned.
func TestCancelRightAfterAFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 4})))(
		func(context.Context, string) (string, error) {
			cancel() // the caller gives up while the attempt is failing
			return "", errOverloaded
		})
	_, err := h(ctx, "x")
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, policies.Canceled, policies.Classify(err).Class)
	var fe *policies.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, telemetry.OutcomeCanceled, fe.Outcome)
	var api *policies.Error
	assert.True(t, errors.As(err, &api), "the attempt's own error is kept beneath")
}
