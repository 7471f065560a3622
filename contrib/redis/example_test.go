package redisstate_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/failsafe-go/failsafe-go"
	"github.com/redis/go-redis/v9"

	"github.com/retrace-go/retrace/clock"
	redisstate "github.com/retrace-go/retrace/contrib/redis"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

// Two workers of a fleet share one circuit breaker through Redis: five
// failures of one open it for both, so the other is refused without calling
// the provider; after the cool-down one probe goes through for the fleet,
// and its success closes the breaker for everyone.
func ExampleNew() {
	addr, stop, err := exampleRedis()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	rdb := redis.NewClient(redisstate.ClientOptions(addr, time.Second))
	defer rdb.Close()
	// A step that takes longer than Timeout is decided on the worker's local
	// state; a second keeps a loaded test machine on the shared one.
	st := redisstate.New(rdb, redisstate.Options{Timeout: time.Second})

	clk := clock.NewFake(time.Unix(0, 0)) // the workers' clocks agree
	calls, down := 0, true
	provider := func(context.Context, string) (string, error) {
		calls++
		if down {
			return "", &policies.Error{StatusCode: 503, Message: "Service unavailable"}
		}
		return "hello", nil
	}
	worker := func() middleware.Handler[string, string] {
		breaker := policies.NewCircuitBreaker[string](policies.BreakerConfig{Name: "openai", State: st, Clock: clk})
		return middleware.Layer[string, string]("model", middleware.Spec[string]{
			Policies: []failsafe.Policy[string]{breaker},
		}, middleware.WithClock(clk))(provider)
	}
	a, b := worker(), worker()
	ctx := context.Background()

	for range 5 {
		_, _ = a(ctx, "hi")
	}
	_, err = b(ctx, "hi")
	var refused *policies.Error
	if errors.As(err, &refused) {
		fmt.Println("b:", refused.Type, "retry in", refused.RetryAfter, "after", calls, "provider calls")
	}

	clk.Advance(time.Minute)
	down = false
	reply, err := b(ctx, "hi") // the fleet's probe
	fmt.Println("b:", reply, err)
	reply, err = a(ctx, "hi")
	fmt.Println("a:", reply, err, "after", calls, "provider calls")
	// Output:
	// b: circuit_open retry in 1m0s after 5 provider calls
	// b: hello <nil>
	// a: hello <nil> after 7 provider calls
}

// The workers of one task draw its retries from one count in Redis, however
// many processes they run in.
func ExampleNew_taskBudget() {
	addr, stop, err := exampleRedis()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	rdb := redis.NewClient(redisstate.ClientOptions(addr, time.Second))
	defer rdb.Close()
	st := redisstate.New(rdb, redisstate.Options{Timeout: time.Second})

	// Two workers of task-42, which may retry 4 times in all.
	a := policies.TaskBudgetFrom(policies.WithSharedTaskBudget(context.Background(), st, "task-42", 4))
	b := policies.TaskBudgetFrom(policies.WithSharedTaskBudget(context.Background(), st, "task-42", 4))
	for range 3 {
		fmt.Println("a:", a.TryDraw(), "b:", b.TryDraw())
	}
	fmt.Println("used", b.Used(), "of 4")
	// Output:
	// a: true b: true
	// a: true b: true
	// a: false b: false
	// used 4 of 4
}

// exampleRedis starts a redis-server on a free port of 127.0.0.1 when one is
// on PATH, else an in-process miniredis, and returns its address and the
// function that stops it.
func exampleRedis() (addr string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		m, err := miniredis.Run()
		if err != nil {
			return "", nil, err
		}
		return m.Addr(), m.Close, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	if err := ln.Close(); err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	// The server logs to stdout that it is ready; the log is read to its end
	// (the server's exit), so that the server never blocks writing it.
	ready, drained := make(chan bool, 1), make(chan struct{})
	go func() {
		defer close(drained)
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			if strings.Contains(lines.Text(), "Ready to accept connections") {
				ready <- true
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		ready <- false
	}()
	stop = func() {
		_ = cmd.Process.Kill()
		<-drained
		_ = cmd.Wait()
	}
	if !<-ready {
		stop()
		return "", nil, errors.New("redis-server exited before it was ready")
	}
	return "127.0.0.1:" + port, stop, nil
}
