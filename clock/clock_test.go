package clock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestFakeSleepWakesOnAdvance(t *testing.T) {
	clk := clock.NewFake(epoch)
	done := make(chan error, 1)
	go func() { done <- clk.Sleep(context.Background(), 8*time.Second) }()

	clk.BlockUntilSleepers(1)
	clk.Advance(7 * time.Second)
	assert.Equal(t, 1, clk.Sleepers(), "7 s of an 8 s sleep must not wake the sleeper")
	clk.Advance(time.Second)
	require.NoError(t, <-done)
	assert.Equal(t, epoch.Add(8*time.Second), clk.Now())
}

func TestFakeSleepEndsOnCancel(t *testing.T) {
	clk := clock.NewFake(epoch)
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("user hit ctrl-c")
	done := make(chan error, 1)
	go func() { done <- clk.Sleep(ctx, 8*time.Second) }()

	clk.BlockUntilSleepers(1)
	cancel(cause)
	require.ErrorIs(t, <-done, cause)
	assert.Equal(t, 0, clk.Sleepers())
	assert.Equal(t, epoch, clk.Now(), "a canceled sleep does not move the clock")
}

func TestFakeAfterFuncRunsInTimeOrder(t *testing.T) {
	clk := clock.NewFake(epoch)
	var got []string
	clk.AfterFunc(3*time.Second, func() { got = append(got, "3s") })
	clk.AfterFunc(time.Second, func() { got = append(got, "1s") })
	stopped := clk.AfterFunc(2*time.Second, func() { got = append(got, "2s") })
	assert.True(t, stopped.Stop())

	clk.Advance(5 * time.Second)
	assert.Equal(t, []string{"1s", "3s"}, got)
	assert.False(t, stopped.Stop(), "a stopped timer stays stopped")
}

func TestVirtualSleepAdvances(t *testing.T) {
	clk := clock.NewVirtual(epoch)
	ctx := context.Background()
	for _, d := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second} {
		require.NoError(t, clk.Sleep(ctx, d))
	}
	assert.Equal(t, epoch.Add(14*time.Second), clk.Now())
	assert.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}, clk.Slept())
}

func TestWithTimeoutOnFakeClock(t *testing.T) {
	clk := clock.NewFake(epoch)
	cause := errors.New("attempt timed out")
	ctx, cancel := clock.WithTimeout(context.Background(), clk, time.Second, cause)
	defer cancel()

	clk.Advance(999 * time.Millisecond)
	require.NoError(t, ctx.Err())
	clk.Advance(time.Millisecond)
	<-ctx.Done()
	assert.ErrorIs(t, context.Cause(ctx), cause)
}

func TestScaledClockUntil(t *testing.T) {
	clk := clock.Scaled(0.001)
	left := clk.Until(time.Now().Add(time.Second))
	// One wall second is a thousand seconds of scaled time (less what elapsed).
	assert.Greater(t, left, 900*time.Second)
	assert.LessOrEqual(t, left, 1000*time.Second)
}

func TestScaledClockSleepCancel(t *testing.T) {
	clk := clock.Scaled(0.5)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, clk.Sleep(ctx, time.Hour), context.Canceled)
}
