package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// agent fails with errs in turn and succeeds after them.
func agent(errs ...error) (runtime.Agent, *int) {
	calls := 0
	return runtime.AgentFunc(func(ctx context.Context, prompt string) (session.Message, error) {
		calls++
		if calls <= len(errs) {
			err := errs[calls-1]
			return session.Message{Role: session.Assistant, StopReason: session.StopError, ErrorMessage: session.ErrorText(err)}, err
		}
		return session.Message{Role: session.Assistant, Content: "done", StopReason: session.StopEnd}, nil
	}), &calls
}

func newRuntime(a runtime.Agent, clk clock.Clock, single bool) *runtime.Runtime {
	return runtime.New(a, runtime.Config{SingleOwner: single, Options: []middleware.Option{middleware.WithClock(clk)}})
}

func TestExecExhausted(t *testing.T) {
	clk := clock.NewVirtual(epoch)
	e503 := &policies.Error{StatusCode: 503, Message: "Service unavailable"}
	a, calls := agent(e503, e503, e503)
	_, err := newRuntime(a, clk, false).Exec(context.Background(), "go")

	var ee *runtime.ExecError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 3, *calls)
	assert.Equal(t, telemetry.OutcomeFailedExhausted, ee.Outcome)
	assert.Equal(t, "exec failed after 3 attempts: [1] APIError: 503: Service unavailable; [2] APIError: 503: Service unavailable; [3] APIError: 503: Service unavailable", err.Error())
	assert.Equal(t, []time.Duration{0, 1500 * time.Millisecond, 3 * time.Second}, []time.Duration{ee.Attempts[0].Delay, ee.Attempts[1].Delay, ee.Attempts[2].Delay})
	assert.Equal(t, []time.Duration{1500 * time.Millisecond, 3 * time.Second}, clk.Slept(), "1.5 s and 3 s: the third attempt is the last, so no 6 s wait")
	assert.Equal(t, policies.Transient, ee.Attempts[0].Class)
	var api *policies.Error
	assert.ErrorAs(t, err, &api)
}

func TestExecPermanent(t *testing.T) {
	clk := clock.NewVirtual(epoch)
	a, calls := agent(errors.New("openai-codex: login expired"))
	_, err := newRuntime(a, clk, false).Exec(context.Background(), "go")
	var ee *runtime.ExecError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 1, *calls)
	assert.Equal(t, telemetry.OutcomeFailedPermanent, ee.Outcome)
	assert.Equal(t, "exec failed permanently after 1 attempt: Error: openai-codex: login expired", err.Error())
	assert.Empty(t, clk.Slept())
}

func TestExecRetriesUnknownErrors(t *testing.T) {
	a, calls := agent(errors.New("something odd"))
	msg, err := newRuntime(a, clock.NewVirtual(epoch), false).Exec(context.Background(), "go")
	require.NoError(t, err, "a runtime retries what it does not know to be permanent")
	assert.Equal(t, "done", msg.Content)
	assert.Equal(t, 2, *calls)
}

func TestExecPanicIsProgrammingError(t *testing.T) {
	calls := 0
	a := runtime.AgentFunc(func(context.Context, string) (session.Message, error) {
		calls++
		var m map[string]int
		m["x"]++ //lint:ignore SA5000 the nil map is the bug under test
		return session.Message{}, nil
	})
	_, err := newRuntime(a, clock.NewVirtual(epoch), false).Exec(context.Background(), "go")
	var ee *runtime.ExecError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 1, calls, "never retried")
	assert.Equal(t, telemetry.OutcomeFailedPermanent, ee.Outcome)
	require.Len(t, ee.Attempts, 1)
	assert.Equal(t, policies.Programming, ee.Attempts[0].Class)
	assert.Contains(t, ee.Attempts[0].Message, "assignment to entry in nil map")
	var pe *policies.Error
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, string(pe.Stack), "runtime_test.TestExecPanicIsProgrammingError")
}

func TestExecUnsupportedIsNotRetried(t *testing.T) {
	a, calls := agent(fmt.Errorf("vision: %w", errors.ErrUnsupported))
	_, err := newRuntime(a, clock.NewVirtual(epoch), false).Exec(context.Background(), "go")
	require.Error(t, err)
	assert.Equal(t, 1, *calls)
}

func TestSingleOwner(t *testing.T) {
	a, calls := agent(&policies.Error{StatusCode: 503})
	r := newRuntime(a, clock.NewVirtual(epoch), true)
	assert.Equal(t, 1, r.MaxAttempts())
	_, err := r.Exec(context.Background(), "go")
	assert.EqualError(t, err, "exec failed after 1 attempt: APIError: 503")
	assert.Equal(t, 1, *calls)
}

func TestExecCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	a := runtime.AgentFunc(func(ctx context.Context, _ string) (session.Message, error) {
		cancel()
		return session.Message{}, ctx.Err()
	})
	_, err := newRuntime(a, clock.NewVirtual(epoch), false).Exec(ctx, "go")
	var ee *runtime.ExecError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, telemetry.OutcomeCanceled, ee.Outcome)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestExecBudget(t *testing.T) {
	e503 := &policies.Error{StatusCode: 503}
	a, calls := agent(e503, e503, e503)
	ctx := policies.WithTaskBudget(context.Background(), 1)
	_, err := newRuntime(a, clock.NewVirtual(epoch), false).Exec(ctx, "go")
	var ee *runtime.ExecError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, telemetry.OutcomeBudgetExhausted, ee.Outcome)
	assert.Equal(t, 2, *calls)
	assert.ErrorIs(t, err, budget.ErrExceeded)
}

func TestExecCanceledBeforeStart(t *testing.T) {
	a, calls := agent()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newRuntime(a, clock.NewVirtual(epoch), false).Exec(ctx, "go")
	assert.Equal(t, 0, *calls)
	assert.EqualError(t, err, "exec canceled before its first attempt: canceled before the first attempt: context canceled")
}
