package middleware_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
)

// A framework's retry loop that retrace does not drive encloses a retrying
// layer: each of its attempts calls the layer, which counts in the root's
// calls and worst case and is named in the nested-retry event.
func TestWithinRetryNamesAnEnclosingLoop(t *testing.T) {
	rec, tp := recorder(t)
	opts := []middleware.Option{tp}
	calls := 0
	inner := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 4})), opts...)(
		func(context.Context, string) (string, error) {
			calls++
			return "", &policies.Error{Class: policies.Transient, Type: "503", Err: errors.New("down")}
		})
	outer := middleware.Layer[string, string]("agent", middleware.Spec[string]{}, opts...)(func(ctx context.Context, req string) (string, error) {
		// The framework's loop: 3 attempts, each calling the layer.
		ctx = middleware.WithinRetry(ctx, "eino.ModelRetry", 3)
		var err error
		for range 3 {
			_, err = inner(ctx, req)
		}
		return "", err
	})
	_, err := outer(context.Background(), "q")
	require.Error(t, err)
	assert.Equal(t, 12, calls)

	roots := layerSpans(rec, "agent")
	require.Len(t, roots, 1)
	root := roots[0]
	assert.EqualValues(t, 12, num(root, telemetry.Calls))
	assert.EqualValues(t, 12, num(root, telemetry.CallsWorstCase))
	assert.Equal(t, []string{"eino.ModelRetry(3) × session(4)"}, retracetest.NestedChains(root))
	for _, s := range layerSpans(rec, "session") {
		assert.EqualValues(t, 1, num(s, telemetry.RetryDepth))
	}
}

// The worst case counts the loop's attempts before they happen: one
// successful attempt of a loop of 3 around a layer of 4 could have been 12.
func TestWithinRetryWorstCaseBeforeTheAttempts(t *testing.T) {
	rec, tp := recorder(t)
	opts := []middleware.Option{tp}
	inner := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 4})), opts...)(
		func(context.Context, string) (string, error) { return "ok", nil })
	outer := middleware.Layer[string, string]("agent", middleware.Spec[string]{}, append(opts, middleware.WithSteps(2))...)(
		func(ctx context.Context, req string) (string, error) {
			for range 2 {
				middleware.NextStep(ctx)
				if _, err := inner(middleware.WithinRetry(ctx, "eino.ModelRetry", 3), req); err != nil {
					return "", err
				}
			}
			return "ok", nil
		})
	_, err := outer(context.Background(), "q")
	require.NoError(t, err)
	root := layerSpans(rec, "agent")[0]
	assert.EqualValues(t, 2, num(root, telemetry.Calls))
	assert.EqualValues(t, 2*3*4, num(root, telemetry.CallsWorstCase))
}

// Outside any layer there is no root to count into: the context is returned
// as it is, and a layer beneath is a root of its own.
func TestWithinRetryOutsideALayer(t *testing.T) {
	ctx := context.Background()
	assert.Equal(t, ctx, middleware.WithinRetry(ctx, "eino.ModelRetry", 3))
	rec, tp := recorder(t)
	h := middleware.Layer[string, string]("session", middleware.Spec[string]{}, tp)(
		func(ctx context.Context, _ string) (string, error) {
			assert.Equal(t, ctx, middleware.WithinRetry(ctx, "x", 1), "fewer than 2 attempts is no loop")
			return "ok", nil
		})
	_, err := h(ctx, "q")
	require.NoError(t, err)
	assert.EqualValues(t, 1, num(layerSpans(rec, "session")[0], telemetry.Calls))
}

// A loop without a limit (a durable engine's default retry policy) around
// a retrying layer: the event names it with "(?)" and the root states no
// worst case, since there is none.
func TestWithinRetryWithoutALimit(t *testing.T) {
	rec, tp := recorder(t)
	opts := []middleware.Option{tp}
	inner := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 4})), opts...)(
		func(context.Context, string) (string, error) { return "ok", nil })
	outer := middleware.Layer[string, string]("activity", middleware.Spec[string]{}, opts...)(func(ctx context.Context, req string) (string, error) {
		return inner(middleware.WithinRetryAttempt(ctx, "temporal", 0), req)
	})
	_, err := outer(context.Background(), "q")
	require.NoError(t, err)
	root := layerSpans(rec, "activity")[0]
	assert.EqualValues(t, 1, num(root, telemetry.Calls))
	_, stated := attr(root, telemetry.CallsWorstCase)
	assert.False(t, stated, "no worst case: the loop has no limit")
	assert.Equal(t, []string{"temporal(?) × session(4)"}, retracetest.NestedChains(root))
}

// One attempt of a loop that makes several layer calls: they add up, and
// the loop multiplies their sum; WithinRetry, one attempt per call, counts
// the costliest.
func TestWithinRetryAttemptAddsUp(t *testing.T) {
	for _, tt := range []struct {
		name  string
		ctx   func(context.Context) context.Context
		worst int64
	}{
		{"an attempt of the whole", func(ctx context.Context) context.Context { return middleware.WithinRetryAttempt(ctx, "temporal", 3) }, 3 * (4 + 4)},
		{"an attempt per call", func(ctx context.Context) context.Context { return middleware.WithinRetry(ctx, "eino.ModelRetry", 3) }, 3 * 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec, tp := recorder(t)
			opts := []middleware.Option{tp}
			inner := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 4})), opts...)(
				func(context.Context, string) (string, error) { return "ok", nil })
			outer := middleware.Layer[string, string]("activity", middleware.Spec[string]{}, opts...)(func(ctx context.Context, req string) (string, error) {
				ctx = tt.ctx(ctx)
				for range 2 { // two turns in one attempt
					if _, err := inner(ctx, req); err != nil {
						return "", err
					}
				}
				return "ok", nil
			})
			_, err := outer(context.Background(), "q")
			require.NoError(t, err)
			root := layerSpans(rec, "activity")[0]
			assert.EqualValues(t, 2, num(root, telemetry.Calls))
			assert.EqualValues(t, tt.worst, num(root, telemetry.CallsWorstCase))
		})
	}
}
