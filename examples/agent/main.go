// Command agent sends a flaky model call through the seed's two retry
// layers, a runtime around a session, and prints the trace as a tree.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry/setup"
)

func main() {
	scale := flag.Float64("time-scale", 0.001, "how fast backoffs pass: 0.001 turns 8 s into 8 ms; 1 is real time")
	flag.Parse()
	if err := run(context.Background(), clock.Scaled(*scale)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, clk clock.Clock) error {
	shutdown, err := setup.Tracing(ctx, setup.WithConsole(os.Stdout), setup.WithServiceName("retrace-agent"))
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.Background()) }()

	// A provider that is overloaded for its first five requests.
	var requests atomic.Int64
	provider := func(ctx context.Context, prompt string) (string, error) {
		if requests.Add(1) <= 5 {
			return "", &policies.APIError{StatusCode: 529, Code: "overloaded_error", Message: "Overloaded"}
		}
		return "hello from the model", nil
	}
	opts := []middleware.Option{middleware.WithClock(clk)}
	session := middleware.PoliciesWith[string, string]("session", opts, policies.NewRetry[string](policies.SessionRetry))
	runtime := middleware.PoliciesWith[string, string]("runtime", opts, policies.NewRetry[string](policies.RuntimeRetry))

	reply, err := runtime(session(provider))(ctx, "say hello")
	if err != nil {
		return err
	}
	fmt.Printf("\nreply: %q after %d provider requests\n", reply, requests.Load())
	return nil
}
