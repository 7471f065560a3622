package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retrace-go/retrace/telemetry"
	"github.com/stretchr/testify/assert"
)

// rate counts a rate budget's permits.
type rate struct{ held, max, acquired int }

func (r *rate) RecordExecution()  {}
func (r *rate) ReleaseExecution() {}
func (r *rate) TryAcquirePermit() bool {
	r.held++
	r.acquired++
	r.max = max(r.max, r.held)
	return true
}
func (r *rate) ReleasePermit() { r.held-- }

// attempts fails every attempt and records whether a rate permit was held
// while each ran.
type attempts struct {
	r    *rate
	held []int
}

func (a *attempts) Attempt(context.Context, int, time.Duration) (int, error) {
	a.held = append(a.held, a.r.held)
	return 0, errors.New("503")
}
func (a *attempts) Judge(context.Context, error) Failure { return Failure{Class: Transient} }
func (a *attempts) Done(int, error, Decision)            {}

// A rate-budget permit is held while its retry runs, and released after it:
// the budget sees the retries in flight.
func TestRatePermitCoversTheRetry(t *testing.T) {
	r := &rate{}
	a := &attempts{r: r}
	_, rep := Do[int](context.Background(), &Retry{MaxAttempts: 3, Rate: r}, nil, a)
	assert.Equal(t, telemetry.OutcomeFailedExhausted, rep.Outcome)
	assert.Equal(t, []int{0, 1, 1}, a.held, "the first call holds none; each retry holds its permit")
	assert.Equal(t, 2, r.acquired)
	assert.Zero(t, r.held, "every permit released")
}

// refused is an attempter whose every attempt a breaker beneath refuses.
type refused struct{ n int }

func (a *refused) Attempt(context.Context, int, time.Duration) (int, error) {
	a.n++
	return 0, errors.New("circuit open")
}
func (a *refused) Judge(context.Context, error) Failure { return Failure{Class: Transient, Held: true} }
func (a *refused) Done(int, error, Decision)            {}

type countBudget struct{ drawn, limit int }

func (b *countBudget) TryDraw() bool {
	if b.drawn >= b.limit {
		return false
	}
	b.drawn++
	return true
}
func (b *countBudget) Limit() int { return b.limit }

// Attempts a breaker beneath refused reached nothing: their retries draw
// nothing from the task budget or a rate budget, and a call whose last
// attempt was refused ends rejected, not failed_exhausted.
func TestRefusedAttemptsAreNotExhaustion(t *testing.T) {
	b := &countBudget{limit: 1}
	r := &rate{}
	a := &refused{}
	_, rep := Do[int](WithBudget(context.Background(), b), &Retry{MaxAttempts: 3, Rate: r}, nil, a)
	assert.Equal(t, 3, a.n, "the layer's attempts, whatever the budget")
	assert.Equal(t, telemetry.OutcomeRejected, rep.Outcome)
	assert.Zero(t, b.drawn, "no retry drawn from the task budget")
	assert.Zero(t, r.acquired, "nor from the rate budget")
}
