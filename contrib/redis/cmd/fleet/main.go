// Command fleet runs a fleet of workers against a provider that is down,
// once with a breaker each and once with one breaker shared through the
// Redis server at -addr (or $REDIS_ADDR), and prints the provider's request
// counts. The demo's fleet scenario runs it when REDIS_ADDR is set:
//
//	go run -C contrib/redis ./cmd/fleet -json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/retrace-go/retrace/bench"
	redisstate "github.com/retrace-go/retrace/contrib/redis"
	"github.com/retrace-go/retrace/policies/state"
)

func main() {
	addr := flag.String("addr", os.Getenv("REDIS_ADDR"), "the Redis server")
	workers := flag.Int("workers", 8, "workers")
	calls := flag.Int("calls", 300, "calls per worker, a second of fleet time apart")
	scale := flag.Float64("time-scale", 0.002, "wall time per fleet second, in seconds")
	asJSON := flag.Bool("json", false, "print one JSON object")
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "fleet: no Redis server: set -addr or REDIS_ADDR")
		os.Exit(2)
	}
	rdb := redis.NewClient(redisstate.ClientOptions(*addr, 50*time.Millisecond))
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		fmt.Fprintln(os.Stderr, "fleet: Redis at", *addr, "does not answer:", err)
		os.Exit(1)
	}
	st := redisstate.New(rdb, redisstate.Options{Namespace: fmt.Sprintf("retrace-fleet-%d-%d", os.Getpid(), time.Now().UnixNano()), Timeout: 50 * time.Millisecond})
	local, _ := run(*workers, *calls, *scale, nil)
	shared, span := run(*workers, *calls, *scale, st)
	out := map[string]any{"workers": *workers, "calls_per_worker": *calls, "redis": *addr,
		"local_downstream": local, "shared_downstream": shared, "shared_fleet_seconds": span.Seconds()}
	if *asJSON {
		_ = json.NewEncoder(os.Stdout).Encode(out)
		return
	}
	fmt.Printf("%d workers × %d calls against a provider that is down: %d requests with a breaker each, %d with one breaker in Redis\n",
		*workers, *calls, local, shared)
}

// run runs the fleet and returns the requests the provider received and how
// long the run took in fleet time.
func run(workers, calls int, scale float64, st state.State) (int64, time.Duration) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	origin := time.Now()
	clk := bench.FleetClock(origin, 1/scale)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			// Workers are spread over one period, as a fleet's are.
			if clk.Sleep(context.Background(), time.Duration(i)*time.Second/time.Duration(workers)) != nil {
				return
			}
			bench.FleetWorker{Name: "provider", Calls: calls, Every: time.Second, State: st, Clock: clk,
				Call: bench.HTTPCall(srv.Client(), srv.URL)}.Run(context.Background())
		})
	}
	wg.Wait()
	return n.Load(), clk.Now().Sub(origin)
}
