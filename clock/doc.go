// Package clock is the time source that every retrace policy waits on.
//
// Backoffs of 2 s, 4 s and 8 s and a circuit breaker's 60 s cool-down are the
// defaults retrace ships with; tests and demos cannot wait for them. Each policy
// takes a [Clock]: [Real] for production, [Scaled] to run the same delays faster
// while spans still report the configured ones, [Fake] for tests that move time
// by hand and await sleepers, and [Virtual] for sequential tests in which every
// sleep completes at once and advances virtual time.
//
//	clk := clock.NewFake(time.Unix(0, 0))
//	go func() { _ = clk.Sleep(ctx, 8*time.Second) }()
//	clk.BlockUntilSleepers(1)
//	clk.Advance(8 * time.Second) // the sleeper returns
package clock
