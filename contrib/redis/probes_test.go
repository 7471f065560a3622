package redisstate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/retrace-go/retrace/bench"
	redisstate "github.com/retrace-go/retrace/contrib/redis"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

// probeEnv tells this test binary, started again, to be a worker of the
// half-open hammer (a JSON probeConfig).
const probeEnv = "RETRACE_REDIS_PROBE_WORKER"

type probeConfig struct {
	Redis     string `json:"redis"`
	Namespace string `json:"namespace"`
	URL       string `json:"url"`
	Start     int64  `json:"start"` // Unix ns: every worker starts then
	For       int64  `json:"for"`   // ns: how long each goroutine calls
}

// The hammer's breaker: two probes at a time, a 20 ms cool-down, so that a
// run half-opens it again and again.
const (
	hammerProbes     = 2
	hammerGoroutines = 8
	hammerProcesses  = 4
)

// runProbeWorker calls the provider through a layer with the shared
// breaker from hammerGoroutines goroutines, each as fast as it can for
// For, and reports how the calls ended: rejected by the breaker, or failed
// by the provider.
func runProbeWorker() int {
	var cfg probeConfig
	if err := json.Unmarshal([]byte(os.Getenv(probeEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	opts := redisstate.ClientOptions(cfg.Redis, stateTimeout)
	opts.DialTimeout = warmUp
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if err := warm(rdb); err != nil {
		fmt.Fprintln(os.Stderr, "worker: Redis does not answer:", err)
		return 2
	}
	st := redisstate.New(rdb, redisstate.Options{Namespace: cfg.Namespace, Timeout: stateTimeout, Watch: true})
	defer st.Close()
	cb := policies.NewCircuitBreaker[struct{}](policies.BreakerConfig{Name: "hammer", State: st, HalfOpenProbes: hammerProbes,
		SuccessThreshold: hammerProbes, Delay: 20 * time.Millisecond})
	layer := middleware.Layer[struct{}, struct{}]("model", middleware.Spec[struct{}]{Policies: []failsafe.Policy[struct{}]{cb}},
		middleware.WithTracerProvider(noop.NewTracerProvider()))
	call := bench.HTTPCall(http.DefaultClient, cfg.URL)
	h := layer(func(ctx context.Context, _ struct{}) (struct{}, error) { return struct{}{}, call(ctx) })
	time.Sleep(time.Until(time.Unix(0, cfg.Start)))
	var mu sync.Mutex
	out := bench.FleetOutcomes{}
	var wg sync.WaitGroup
	for range hammerGoroutines {
		wg.Go(func() {
			mine := bench.FleetOutcomes{}
			for end := time.Unix(0, cfg.Start+cfg.For); time.Now().Before(end); {
				_, err := h(context.Background(), struct{}{})
				switch {
				case errors.Is(err, circuitbreaker.ErrOpen):
					mine["rejected"]++
				case err != nil:
					mine["failed"]++
				default:
					mine["success"]++
				}
			}
			mu.Lock()
			for o, n := range mine {
				out[o] += n
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return 2
	}
	return 0
}

// Four processes of eight goroutines each hammer a breaker that Redis
// holds open, cooling down for 20 ms at a time, behind a provider that is
// down: every call that reaches the provider is a half-open probe, and at
// no moment are more of them out, fleet-wide, than the breaker's two
// probe slots. The workers refuse calls themselves while the breaker
// cools down; the half-open transition and the grants are Redis's.
func TestHalfOpenProbesHoldAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	addr := redisAddr(t)
	var inflight, most, probes atomic.Int64
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := inflight.Add(1)
		probes.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		// The probe takes a while, as a provider's answer does, so that
		// probes granted together overlap here.
		time.Sleep(2 * time.Millisecond)
		inflight.Add(-1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(provider.Close)

	cfg := probeConfig{Redis: addr, Namespace: fmt.Sprintf("hammer-%d", time.Now().UnixNano()), URL: provider.URL,
		Start: startAt(), For: int64(time.Second)}
	// The breaker is open in Redis before the workers start: whatever
	// reaches the provider was let through as a probe.
	rdb := redis.NewClient(redisstate.ClientOptions(addr, testStep))
	defer rdb.Close()
	st := redisstate.New(rdb, redisstate.Options{Namespace: cfg.Namespace, Timeout: testStep})
	policies.NewCircuitBreaker[struct{}](policies.BreakerConfig{Name: "hammer", State: st, HalfOpenProbes: hammerProbes,
		SuccessThreshold: hammerProbes, Delay: 20 * time.Millisecond}).Open()

	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmds := make([]*exec.Cmd, hammerProcesses)
	outs := make([]*os.File, hammerProcesses)
	for i := range cmds {
		f, err := os.CreateTemp(t.TempDir(), "probe")
		require.NoError(t, err)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), probeEnv+"="+string(b))
		cmd.Stdout, cmd.Stderr = f, os.Stderr
		require.NoError(t, cmd.Start())
		cmds[i], outs[i] = cmd, f
	}
	total := bench.FleetOutcomes{}
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "worker %d", i)
		raw, err := os.ReadFile(outs[i].Name())
		require.NoError(t, err)
		var o bench.FleetOutcomes
		require.NoError(t, json.Unmarshal(raw, &o), "worker %d: %s", i, raw)
		for k, n := range o {
			total[k] += n
		}
		_ = outs[i].Close()
	}
	t.Logf("%d processes × %d goroutines for %s: outcomes %v; %d probes reached the provider, at most %d at once (slots %d)",
		hammerProcesses, hammerGoroutines, time.Duration(cfg.For), total, probes.Load(), most.Load(), hammerProbes)
	require.Zero(t, total["success"], "the provider is down")
	require.Equal(t, probes.Load(), int64(total["failed"]), "every call that failed was a probe that reached the provider")
	require.Greater(t, probes.Load(), int64(2*hammerProbes), "the hammer half-opened the breaker again and again")
	require.LessOrEqual(t, most.Load(), int64(hammerProbes), "fleet-wide probes out at once")
}
