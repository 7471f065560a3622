package clock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/failsafe-go/failsafe-go"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

// A Fake moves only when told to: a test awaits the sleeper, instead of
// sleeping itself, and then advances the time past its wake-up.
func ExampleNewFake() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)

	woke := make(chan time.Time)
	go func() {
		_ = clk.Sleep(context.Background(), 8*time.Second)
		woke <- clk.Now()
	}()

	clk.BlockUntilSleepers(1) // the goroutine is asleep: nothing else wakes it
	clk.Advance(5 * time.Second)
	fmt.Println("after 5s:", clk.Sleepers(), "sleeper")
	clk.Advance(3 * time.Second)
	fmt.Println("woke at", (<-woke).Sub(start))
	// Output:
	// after 5s: 1 sleeper
	// woke at 8s
}

// A layer waits its backoffs on the clock it is given (middleware.WithClock):
// on a Fake, a test steps through a retry's 2 s and 4 s waits one at a time,
// and no real time passes.
func ExampleNewFake_layer() {
	start := time.Unix(0, 0)
	clk := clock.NewFake(start)
	calls := 0
	provider := func(context.Context, string) (string, error) {
		calls++
		fmt.Printf("call %d at %s\n", calls, clk.Now().Sub(start))
		if calls < 3 {
			return "", &policies.Error{StatusCode: 503, Message: "Service unavailable"}
		}
		return "hello", nil
	}
	call := middleware.Layer[string, string]("session", middleware.Spec[string]{
		Policies: []failsafe.Policy[string]{policies.NewRetry[string](policies.SessionRetry)},
	}, middleware.WithClock(clk))(provider)

	done := make(chan string)
	go func() {
		reply, _ := call(context.Background(), "hi")
		done <- reply
	}()
	clk.BlockUntilSleepers(1) // the first backoff
	clk.Advance(2 * time.Second)
	clk.BlockUntilSleepers(1) // the second
	clk.Advance(4 * time.Second)
	fmt.Println(<-done)
	// Output:
	// call 1 at 0s
	// call 2 at 2s
	// call 3 at 6s
	// hello
}

// A virtual clock completes every sleep at once and moves its time forward:
// a sequential test of a retry runs in microseconds, then reads what the
// layer waited.
func ExampleNewVirtual() {
	clk := clock.NewVirtual(time.Unix(0, 0))
	call := middleware.Layer[string, string]("session", middleware.Spec[string]{
		Policies: []failsafe.Policy[string]{policies.NewRetry[string](policies.SessionRetry)},
	}, middleware.WithClock(clk))(func(context.Context, string) (string, error) {
		return "", &policies.Error{StatusCode: 503, Message: "Service unavailable"}
	})

	_, err := call(context.Background(), "hi")
	fmt.Println(err)
	fmt.Println("slept", clk.Slept(), "in", clk.Now().Sub(time.Unix(0, 0)), "of clock time")
	// Output:
	// session: failed after 4 attempts: 503: Service unavailable
	// slept [2s 4s 8s] in 14s of clock time
}
