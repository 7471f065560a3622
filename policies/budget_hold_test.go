package policies_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
)

// ratioLog is a state.Memory (a state.Stepper) that keeps each ratio step
// it is sent, in a batch or alone.
type ratioLog struct {
	*state.Memory
	mu  sync.Mutex
	ops []state.RatioOp
}

func (l *ratioLog) Ratio(ctx context.Context, key string, op state.RatioOp) (state.RatioView, error) {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
	return l.Memory.Ratio(ctx, key, op)
}

func (l *ratioLog) Steps(ctx context.Context, steps []state.Step) ([]state.StepResult, error) {
	l.mu.Lock()
	for _, s := range steps {
		if s.Ratio != nil {
			l.ops = append(l.ops, *s.Ratio)
		}
	}
	l.mu.Unlock()
	return l.Memory.Steps(ctx, steps)
}

func (l *ratioLog) sent() []state.RatioOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]state.RatioOp(nil), l.ops...)
}

// A shared retry budget holds its calls' records back: 15 calls send none;
// the 16th sends all 16 as one step; a retry's ask carries the calls held
// since, recorded before it asks, so a worker's own calls always count
// toward its retries.
func TestRetryBudgetHoldsCallRecords(t *testing.T) {
	st := &ratioLog{Memory: state.NewMemory()}
	clk := clock.NewFake(time.Unix(1000, 0))
	budget := policies.NewRetryBudget(policies.RetryBudgetConfig{Name: "p", State: st, Clock: clk, Ratio: 0.5, MinRetries: -1})
	retry := policies.RetryConfig{MaxAttempts: 2, Clock: clock.NewVirtual(time.Unix(0, 0)), Budget: budget}
	layer := middleware.Layer[int, int]("tool", middleware.Spec[int]{Policies: []failsafe.Policy[int]{policies.NewRetry[int](retry)}})
	fails := 0
	h := layer(func(context.Context, int) (int, error) {
		if fails > 0 {
			fails--
			return 0, &policies.Error{StatusCode: 503}
		}
		return 1, nil
	})
	for range 15 {
		_, err := h(context.Background(), 0)
		require.NoError(t, err)
	}
	require.Empty(t, st.sent(), "15 calls held back")
	_, err := h(context.Background(), 0)
	require.NoError(t, err)
	ops := st.sent()
	require.Len(t, ops, 1)
	require.False(t, ops[0].Retry)
	require.Equal(t, 16, ops[0].Calls, "the 16th call's record carries all 16")

	for range 3 {
		_, err := h(context.Background(), 0)
		require.NoError(t, err)
	}
	fails = 1
	_, err = h(context.Background(), 0)
	require.NoError(t, err, "the retry was allowed: 1 ≤ 0.5 × 20 calls")
	ops = st.sent()
	require.Len(t, ops, 2)
	require.True(t, ops[1].Retry)
	require.Equal(t, 4, ops[1].Calls, "the retry's ask carries the 4 calls held since, its own included")

	// A tenth of the window after the first held record, the next call's
	// record carries them.
	_, err = h(context.Background(), 0)
	require.NoError(t, err)
	require.Len(t, st.sent(), 2)
	clk.Advance(budget.Config().Window / 10)
	_, err = h(context.Background(), 0)
	require.NoError(t, err)
	ops = st.sent()
	require.Len(t, ops, 3)
	require.Equal(t, 2, ops[2].Calls)
	v, err := st.Memory.Ratio(context.Background(), "retry:p", state.RatioOp{Retry: true, Now: clk.Now(), Window: budget.Config().Window, Ratio: 0.5})
	require.NoError(t, err)
	require.InDelta(t, 22, v.Calls, 1e-9, "every call reached the State")
}
