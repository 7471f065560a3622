package middleware_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// errFlaky is an error no default rule recognises; a user rule says it is
// Transient.
var errFlaky = errors.New("flaky upstream")

var flakyIsTransient = policies.NewClassifier(func(err error) (policies.Classification, bool) {
	if errors.Is(err, errFlaky) {
		return policies.Classification{Class: policies.Transient, Type: "flaky", Reason: "rule: flaky"}, true
	}
	return policies.Classification{}, false
})

// A breaker's own classifier decides what it counts under the middleware,
// even where the layer's classifier says otherwise.
func TestBreakerOwnClassifierUnderMiddleware(t *testing.T) {
	clk := clock.NewFake(epoch)
	cb := policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: 2, Classifier: flakyIsTransient})
	leaf, calls := counting(errFlaky)
	h := middleware.Layer[string, string]("tool", spec(cb), middleware.WithClock(clk))(leaf)
	for range 3 {
		_, _ = h(context.Background(), "x")
	}
	assert.Equal(t, int64(2), calls.Load(), "the breaker counted the rule's Transient failures and opened after 2")
	assert.True(t, cb.IsOpen())

	// Without its own classifier, the layer's counts.
	cb2 := policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: 2})
	leaf2, calls2 := counting(errFlaky)
	h2 := middleware.Layer[string, string]("tool", spec(cb2), middleware.WithClock(clk), middleware.WithClassifier(flakyIsTransient))(leaf2)
	for range 3 {
		_, _ = h2(context.Background(), "x")
	}
	assert.Equal(t, int64(2), calls2.Load())
	assert.True(t, cb2.IsOpen(), "the layer's classifier reached the breaker")

	// And with neither, the error is Unknown, which a breaker ignores.
	cb3 := policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: 2})
	leaf3, calls3 := counting(errFlaky)
	h3 := middleware.Layer[string, string]("tool", spec(cb3))(leaf3)
	for range 3 {
		_, _ = h3(context.Background(), "x")
	}
	assert.Equal(t, int64(3), calls3.Load())
	assert.True(t, cb3.IsClosed())
}

// One WithClock reaches the breaker: its cool-down runs on the layer's
// clock, as the retry's sleeps do.
func TestOneClockReachesTheBreaker(t *testing.T) {
	clk := clock.NewFake(epoch)
	cb := policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: 1, Delay: time.Minute})
	leaf, calls := counting(errOverloaded, nil)
	h := middleware.Layer[string, string]("tool", spec(cb), middleware.WithClock(clk))(leaf)

	_, err := h(context.Background(), "x")
	require.Error(t, err)
	_, err = h(context.Background(), "x")
	var rej *policies.Error
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, time.Minute, rej.RetryAfter, "the remaining cool-down, on the layer's clock")

	clk.Advance(time.Minute)
	out, err := h(context.Background(), "x")
	require.NoError(t, err, "a minute of the layer's clock ended the cool-down; the wall clock did not move")
	assert.Equal(t, "ok:x", out)
	assert.Equal(t, int64(2), calls.Load())
	assert.True(t, cb.IsClosed())
}

// A plain failsafe-go retry policy draws its retries from the task budget
// too: a budget of 1 allows the first call and one retry.
func TestPlainRetryPolicyUnderTaskBudget(t *testing.T) {
	rec, tp := recorder(t)
	plain := retrypolicy.NewBuilder[string]().WithMaxAttempts(6).Build()
	leaf, calls := counting(errOverloaded)
	h := middleware.Layer[string, string]("tool", spec(plain), tp)(leaf)

	ctx := policies.WithTaskBudget(context.Background(), 1)
	_, err := h(ctx, "x")
	require.Error(t, err)
	assert.Equal(t, int64(2), calls.Load(), "the first call and the one retry the budget allows")
	assert.ErrorIs(t, err, budget.ErrExceeded)
	var api *policies.Error
	assert.ErrorAs(t, err, &api, "the last real error is kept")
	l := layerSpans(rec, "tool")[0]
	assert.Equal(t, string(telemetry.OutcomeBudgetExhausted), str(l, telemetry.Outcome))
	assert.Equal(t, int64(2), num(l, telemetry.Calls))
}

// An outer retry does not wait out an inner breaker's 60 s cool-down: its
// MaxRetryAfter (30 s by default) is shorter, so it stops at once with
// outcome rejected and says how long the circuit stays open.
func TestOuterRetryStopsOnLongCoolDown(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewFake(epoch)
	opts := []middleware.Option{tp, middleware.WithClock(clk)}
	leaf, calls := counting(errOverloaded)
	inner := middleware.Layer[string, string]("tool", spec(policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: 1})), opts...)
	outer := middleware.Layer[string, string]("runtime", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3, RetryUnknown: true})), opts...)
	h := middleware.Chain(outer, inner)(leaf)

	_, err := h(context.Background(), "x")
	require.Error(t, err)
	assert.Equal(t, int64(1), calls.Load(), "the failure opened the breaker; the second attempt was refused")
	assert.Empty(t, clk.Slept(), "nothing waited on the 60 s cool-down")
	assert.Equal(t, epoch, clk.Now())
	var fe *policies.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, telemetry.OutcomeRejected, fe.Outcome)
	assert.Equal(t, 2, fe.Attempts)
	assert.Contains(t, fe.Diagnosis(), "a circuit beneath stays open for another 1m0s, longer than the 30s this layer waits")
	assert.Equal(t, "rejected", str(layerSpans(rec, "runtime")[0], telemetry.Outcome))

	// A cool-down shorter than MaxRetryAfter is waited out, on the clock.
	clk2 := clock.NewVirtual(epoch)
	opts2 := []middleware.Option{middleware.WithClock(clk2)}
	leaf2, calls2 := counting(errOverloaded, nil)
	h2 := middleware.Chain(
		middleware.Layer[string, string]("runtime", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3})), opts2...),
		middleware.Layer[string, string]("tool", spec(policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: 1, Delay: 10 * time.Second})), opts2...),
	)(leaf2)
	out, err := h2(context.Background(), "x")
	require.NoError(t, err)
	assert.Equal(t, "ok:x", out)
	assert.Equal(t, int64(2), calls2.Load())
	assert.Equal(t, []time.Duration{10 * time.Second}, clk2.Slept(), "it waited the breaker's cool-down, then the probe succeeded")
}

// Every failed attempt span says which rule decided its class.
func TestFailedAttemptSpansCarryTheReason(t *testing.T) {
	rec, tp := recorder(t)
	leaf, _ := counting(errOverloaded, &policies.Error{StatusCode: 401, Code: "invalid_api_key"})
	h := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 4})), tp)(leaf)
	_, err := h(context.Background(), "x")
	require.Error(t, err)
	spans := attemptSpans(rec, "session")
	require.Len(t, spans, 2)
	assert.Equal(t, "http 503 overloaded_error", str(spans[0], telemetry.ErrorReason))
	assert.Equal(t, "http 401 invalid_api_key", str(spans[1], telemetry.ErrorReason))
	// The layer span says what the call ended as; the rule that decided is
	// its attempts' to tell, each for its own failure.
	layer := layerSpans(rec, "session")[0]
	assert.Equal(t, "permanent", str(layer, telemetry.ErrorClass))
	assert.Empty(t, str(layer, telemetry.ErrorReason), "the reason is on the attempt spans, not repeated on the layer's")

	// A layer that narrates no attempts has only its own span to say it on.
	rec2, tp2 := recorder(t)
	leaf2, _ := counting(&policies.Error{StatusCode: 401, Code: "invalid_api_key"})
	_, err = middleware.Layer[string, string]("tool", spec(policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: 5})), tp2)(leaf2)(context.Background(), "x")
	require.Error(t, err)
	require.Empty(t, attemptSpans(rec2, "tool"))
	assert.Equal(t, "http 401 invalid_api_key", str(layerSpans(rec2, "tool")[0], telemetry.ErrorReason))
}

// A layer with no retry policy passes its handler's error through unchanged
// and narrates no attempts; an error no rule recognises, not retried, ends
// failed_unknown, never "permanently".
func TestNoRetryLayerPassesErrorsThrough(t *testing.T) {
	rec, tp := recorder(t)
	weird := errors.New("weird")
	leaf, _ := counting(weird)
	h := middleware.Layer[string, string]("model", middleware.Spec[string]{}, tp)(leaf)
	_, err := h(context.Background(), "x")
	assert.Same(t, weird, err)
	l := layerSpans(rec, "model")[0]
	assert.Equal(t, string(telemetry.OutcomeFailedUnknown), str(l, telemetry.Outcome))
	_, hasAttempts := attr(l, telemetry.Attempts)
	assert.False(t, hasAttempts)
	_, hasDiagnosis := attr(l, telemetry.Diagnosis)
	assert.False(t, hasDiagnosis)

	h2 := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 4})), tp)(leaf)
	_, err = h2(context.Background(), "x")
	var fe *policies.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, telemetry.OutcomeFailedUnknown, fe.Outcome)
	assert.Equal(t, 1, fe.Attempts, "a session does not retry what it does not know")
	assert.NotContains(t, err.Error(), "permanently")
	assert.Contains(t, err.Error(), "no rule recognises")
}

// Under failsafe.With, the same engine decides: the outer retry stops on an
// inner breaker's long cool-down too.
func TestFailsafeWithUsesTheSameEngine(t *testing.T) {
	clk := clock.NewFake(epoch)
	cb := policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: 1, Clock: clk})
	cb.Open()
	calls := 0
	_, err := failsafe.With[string](policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3, Clock: clk})).Get(func() (string, error) {
		calls++
		return failsafe.With[string](cb).Get(func() (string, error) { return "", errOverloaded })
	})
	var fe *policies.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, telemetry.OutcomeRejected, fe.Outcome)
	assert.Equal(t, 1, calls)
	assert.Empty(t, clk.Slept())
}
