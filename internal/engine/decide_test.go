package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/telemetry"
)

// gate is a Gate that refuses with err (nil: lets the retry through).
type gate struct{ err error }

func (g gate) Refusal() error { return g.err }

// refusingRate is a rate budget that has no permit left.
type refusingRate struct{ rate }

func (*refusingRate) TryAcquirePermit() bool { return false }

// Decide's table, row by row, in the order it checks: each case is the first
// row that applies to it, and the decision is that row's.
func TestDecideTable(t *testing.T) {
	epoch := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	backoff := func(n int) time.Duration { return time.Duration(n) * time.Second }
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	// A deadline an hour away on the wall clock (the context ends on it),
	// 1.5 s away on the layer's fake clock (Decide measures on it).
	shortDeadline := func() (context.Context, clock.Clock) {
		deadline := time.Now().Add(time.Hour)
		ctx, stop := context.WithDeadline(context.Background(), deadline)
		t.Cleanup(stop)
		return ctx, clock.NewFake(deadline.Add(-1500 * time.Millisecond))
	}
	budget := func(limit, drawn int) context.Context {
		return WithBudget(context.Background(), &countBudget{limit: limit, drawn: drawn})
	}
	open := errors.New("the breaker just opened")
	tests := []struct {
		name  string
		ctx   context.Context
		retry Retry
		n     int
		f     Failure
		gate  Gate
		want  Decision
	}{
		{name: "the caller's context ended", ctx: canceled, n: 1, f: Failure{Class: Transient},
			want: Decision{Outcome: telemetry.OutcomeCanceled}},
		{name: "this layer's own breaker or bulkhead refused", n: 1, f: Failure{Class: Transient, Rejected: true},
			want: Decision{Outcome: telemetry.OutcomeRejected}},
		{name: "permanent: its own outcome", n: 1, f: Failure{Class: Permanent},
			want: Decision{Outcome: telemetry.OutcomeFailedPermanent}},
		{name: "fatal", n: 1, f: Failure{Class: Fatal}, want: Decision{Outcome: telemetry.OutcomeFailedFatal}},
		{name: "unknown, not retried", n: 1, f: Failure{Class: Unknown}, want: Decision{Outcome: telemetry.OutcomeFailedUnknown}},
		{name: "unknown, retried when the layer says so", retry: Retry{RetryUnknown: true}, n: 1, f: Failure{Class: Unknown},
			want: Decision{Retry: true, Delay: time.Second}},
		{name: "programming: never retried", n: 1, f: Failure{Class: Programming}, want: Decision{Outcome: telemetry.OutcomeFailedPermanent}},
		{name: "attempts spent, the last refused beneath", n: 3, f: Failure{Class: Transient, Held: true, RetryAfter: time.Second},
			want: Decision{Outcome: telemetry.OutcomeRejected, Why: "a circuit beneath refused the last attempt"}},
		{name: "attempts spent", n: 3, f: Failure{Class: Transient}, want: Decision{Outcome: telemetry.OutcomeFailedExhausted}},
		{name: "the failure just opened the layer's breaker", n: 1, f: Failure{Class: Transient}, gate: gate{open},
			want: Decision{Outcome: telemetry.OutcomeRejected, Refusal: open}},
		{name: "a circuit beneath stays open longer than the layer waits", n: 1,
			f:    Failure{Class: Transient, Held: true, RetryAfter: 2 * time.Minute},
			want: Decision{Outcome: telemetry.OutcomeRejected, Why: "a circuit beneath stays open for another 2m0s, longer than the 1m0s this layer waits"}},
		{name: "the wait would pass the deadline", n: 2, f: Failure{Class: Transient},
			want: Decision{Outcome: telemetry.OutcomeFailedExhausted, Why: "the next retry, in 2s, would start after the deadline (1.5s left)"}},
		{name: "a retry after a refusal beneath draws from no budget", ctx: budget(1, 1), n: 1,
			f: Failure{Class: Transient, Held: true, RetryAfter: 5 * time.Second}, want: Decision{Retry: true, Delay: 5 * time.Second}},
		{name: "the task budget is spent", ctx: budget(2, 2), n: 1, f: Failure{Class: Transient},
			want: Decision{Outcome: telemetry.OutcomeBudgetExhausted, Why: "the task's retry budget of 2 is spent"}},
		{name: "the rate budget refuses", retry: Retry{Rate: &refusingRate{}}, n: 1, f: Failure{Class: Transient},
			want: Decision{Outcome: telemetry.OutcomeBudgetExhausted, Why: "the retry budget's rate is exceeded"}},
		{name: "retry after the backoff", ctx: budget(2, 1), n: 2, f: Failure{Class: Transient},
			want: Decision{Retry: true, Delay: 2 * time.Second}},
		{name: "retry after the server's hint, when it is longer than the backoff", n: 1,
			f: Failure{Class: Transient, RetryAfter: 30 * time.Second}, want: Decision{Retry: true, Delay: 30 * time.Second}},
		{name: "a hint is capped at MaxRetryAfter", n: 1, f: Failure{Class: Transient, RetryAfter: time.Hour},
			want: Decision{Retry: true, Delay: time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Retry{MaxAttempts: 3, Backoff: backoff, MaxRetryAfter: time.Minute}
			r.RetryUnknown, r.Rate = tt.retry.RetryUnknown, tt.retry.Rate
			ctx, clk := tt.ctx, clock.Clock(clock.NewFake(epoch))
			if ctx == nil {
				ctx = context.Background()
			}
			if tt.name == "the wait would pass the deadline" {
				ctx, clk = shortDeadline()
			}
			got := r.Decide(ctx, clk, tt.n, tt.f, tt.gate)
			assert.Equal(t, tt.want, got)
		})
	}
}

// A budget that a draw exhausts stops the retry with the use that decided.
func TestDecideSaysWhereTheBudgetDecided(t *testing.T) {
	b := &sharedBudget{use: state.Use{Policy: state.PolicyBudget, Shared: true}}
	r := Retry{MaxAttempts: 3}
	d := r.Decide(WithBudget(context.Background(), b), clock.NewFake(time.Unix(0, 0)), 1, Failure{Class: Transient}, nil)
	assert.Equal(t, telemetry.OutcomeBudgetExhausted, d.Outcome)
	assert.Equal(t, b.use, d.State)
}

type sharedBudget struct {
	countBudget
	use state.Use
}

func (b *sharedBudget) Draw(context.Context) (bool, state.Use) { return false, b.use }

// The loop: success on a later attempt, cancellation during a backoff (on a
// fake clock that never advances, so only the cancel ends the wait), and a
// gate's refusal joined to the last error.
func TestDoEnds(t *testing.T) {
	t.Run("success after a retry", func(t *testing.T) {
		a := &script{errs: []error{errors.New("503"), nil}}
		_, rep := Do[int](context.Background(), &Retry{MaxAttempts: 3}, nil, a)
		assert.Equal(t, Report{Attempts: 2, Outcome: telemetry.OutcomeSuccessAfterRetry}, rep)
		assert.Equal(t, []string{telemetry.OutcomeSuccessAfterRetry}, a.outcomes[1:])
	})
	t.Run("canceled during the backoff", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		clk := clock.NewFake(time.Unix(0, 0))
		a := &script{errs: []error{errors.New("503")}, onDone: func() { cancel(errors.New("the user left")) }}
		_, rep := Do[int](ctx, &Retry{MaxAttempts: 3, Backoff: func(int) time.Duration { return time.Hour }}, clk, a)
		assert.Equal(t, telemetry.OutcomeCanceled, rep.Outcome)
		assert.Equal(t, "during the 1h0m0s backoff", rep.Why)
		assert.EqualError(t, rep.Cause, "the user left")
		assert.Equal(t, 1, rep.Attempts)
	})
	t.Run("canceled before the first attempt", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		a := &script{}
		_, rep := Do[int](ctx, &Retry{MaxAttempts: 3}, nil, a)
		assert.Equal(t, telemetry.OutcomeCanceled, rep.Outcome)
		assert.Zero(t, a.calls, "nothing called")
	})
	t.Run("the gate's refusal is joined to the last error", func(t *testing.T) {
		last, open := errors.New("503"), errors.New("circuit open")
		a := &gatedScript{script: script{errs: []error{last}}, refusal: open}
		_, rep := Do[int](context.Background(), &Retry{MaxAttempts: 3}, nil, a)
		require.Equal(t, telemetry.OutcomeRejected, rep.Outcome)
		assert.ErrorIs(t, rep.Err, last)
		assert.ErrorIs(t, rep.Err, open)
	})
}

// script fails its attempts with errs in turn (the last one repeats; nil
// succeeds), judging every failure Transient.
type script struct {
	errs     []error
	calls    int
	outcomes []string
	onDone   func()
}

func (s *script) Attempt(context.Context, int, time.Duration) (int, error) {
	s.calls++
	if len(s.errs) == 0 {
		return 0, nil
	}
	return 0, s.errs[min(s.calls, len(s.errs))-1]
}
func (s *script) Judge(context.Context, error) Failure { return Failure{Class: Transient} }
func (s *script) Done(_ int, _ error, d Decision) {
	s.outcomes = append(s.outcomes, d.Outcome)
	if s.onDone != nil {
		s.onDone()
	}
}

type gatedScript struct {
	script
	refusal error
}

func (g *gatedScript) Refusal() error { return g.refusal }

func TestRound(t *testing.T) {
	assert.Equal(t, 1500*time.Millisecond, Round(1549*time.Millisecond))
	assert.Equal(t, 12*time.Millisecond, Round(12345*time.Microsecond))
	assert.Equal(t, 999*time.Microsecond, Round(999*time.Microsecond))
}
