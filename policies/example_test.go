package policies_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/failsafe-go/failsafe-go"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/policies"
)

func ExampleClassify() {
	for _, err := range []error{
		&policies.Error{StatusCode: 429, Code: "rate_limit_exceeded", RetryAfter: 3 * time.Second},
		&policies.Error{StatusCode: 429, Code: "insufficient_quota"},
		&policies.Error{StatusCode: 400, Code: "context_length_exceeded"},
		errors.New("openai-codex: login expired"),
		errors.New(""), // a stream that dropped without a word
	} {
		c := policies.Classify(err)
		fmt.Printf("%-16s %-24s %s\n", c.Class, c.Type, c.Reason)
	}
	// Output:
	// transient        rate_limit_exceeded      http 429 rate_limit_exceeded
	// fatal            insufficient_quota       http 429 insufficient_quota
	// context_overflow context_length_exceeded  http 400 context_length_exceeded
	// permanent        _OTHER                   marker: login expired
	// transient        _OTHER                   empty message
}

func ExampleNewRetry() {
	clk := clock.NewVirtual(time.Unix(0, 0)) // the backoffs pass at once
	cfg := policies.SessionRetry
	cfg.Clock = clk
	calls := 0
	_, err := failsafe.With(policies.NewRetry[string](cfg)).Get(func() (string, error) {
		calls++
		return "", &policies.Error{StatusCode: 503, Message: "service unavailable"}
	})
	fmt.Println(calls, "calls, slept", clk.Slept())
	fmt.Println(err)
	// Output:
	// 4 calls, slept [2s 4s 8s]
	// failed after 4 attempts: 503: service unavailable
}

func ExampleWithTaskBudget() {
	ctx := policies.WithTaskBudget(context.Background(), 6)
	b := policies.TaskBudgetFrom(ctx)
	for range 7 {
		b.TryDraw()
	}
	fmt.Println(b.Used(), "used,", b.Remaining(), "left,", b.Denied(), "denied")
	// Output: 6 used, 0 left, 1 denied
}
