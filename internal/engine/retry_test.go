package engine

import (
	"context"
	"errors"
	"testing"
	"time"

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
	assert.Equal(t, OutcomeFailedExhausted, rep.Outcome)
	assert.Equal(t, []int{0, 1, 1}, a.held, "the first call holds none; each retry holds its permit")
	assert.Equal(t, 2, r.acquired)
	assert.Zero(t, r.held, "every permit released")
}
