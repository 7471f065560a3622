package redisstate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/bench"
	redisstate "github.com/retrace-go/retrace/contrib/redis"
	"github.com/retrace-go/retrace/policies/state"
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

// The hammer: two probe slots (hammerOp), four processes of eight
// goroutines.
const (
	hammerProbes     = 2
	hammerGoroutines = 8
	hammerProcesses  = 4
)

// runProbeWorker asks Redis for calls from hammerGoroutines goroutines,
// each as fast as it can for For, with the batch a breaker's admit sends
// (the rate budget's record of the call, the acquire), makes each call it
// is granted against the provider, telling it the permit's generation and
// whether it is a probe, and records the call's failure. It asks Redis
// every time, cooling down or not: the hammer is on Redis's grants.
func runProbeWorker() int {
	var cfg probeConfig
	if err := json.Unmarshal([]byte(os.Getenv(probeEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// Steps may take their time (a loaded machine, the race detector).
	opts := redisstate.ClientOptions(cfg.Redis, testStep)
	opts.DialTimeout = warmUp
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if err := warm(rdb); err != nil {
		fmt.Fprintln(os.Stderr, "worker: Redis does not answer:", err)
		return 2
	}
	st := redisstate.New(rdb, redisstate.Options{Namespace: cfg.Namespace, Timeout: testStep})
	settings := hammerOp()
	time.Sleep(time.Until(time.Unix(0, cfg.Start)))
	var mu sync.Mutex
	out := bench.FleetOutcomes{}
	var wg sync.WaitGroup
	errs := make(chan error, hammerGoroutines)
	for range hammerGoroutines {
		wg.Go(func() {
			mine := bench.FleetOutcomes{}
			ctx := context.Background()
			for end := time.Unix(0, cfg.Start+cfg.For); time.Now().Before(end); {
				now := time.Now()
				acquire := settings
				acquire.Kind, acquire.Now = state.BreakerAcquire, now
				res, err := st.Steps(ctx, []state.Step{
					{Key: "retry:hammer", Ratio: &state.RatioOp{Now: now, Window: time.Second, Ratio: 0.1}},
					{Key: "breaker:hammer", Breaker: &acquire},
				})
				if err != nil {
					errs <- err
					return
				}
				v := res[1].Breaker
				if !v.Granted {
					mine["refused"]++
					continue
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL, nil)
				req.Header.Set("X-Gen", strconv.FormatUint(v.Gen, 10))
				req.Header.Set("X-Probe", strconv.FormatBool(v.Probe))
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_ = resp.Body.Close()
				}
				mine["probe="+strconv.FormatBool(v.Probe)]++
				rec := settings
				rec.Kind, rec.Now, rec.Gen, rec.Probe, rec.Count = state.BreakerRecord, time.Now(), v.Gen, v.Probe, state.Fail
				if _, err := st.Breaker(ctx, "breaker:hammer", rec); err != nil {
					errs <- err
					return
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
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return 2
	}
	return 0
}

// hammerOp is the hammer's breaker: two probe slots, a 20 ms cool-down, so
// that a run half-opens it again and again; a probe holds its slot for a
// minute (ProbeLease), so that a probe slower than the cool-down on a
// loaded machine is still out, not lost, and its slot is not given again.
func hammerOp() state.BreakerOp {
	return state.BreakerOp{FailureThreshold: 5, Delay: 20 * time.Millisecond, HalfOpenProbes: hammerProbes,
		SuccessThreshold: hammerProbes, ProbeLease: time.Minute, TTL: time.Hour}
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
	var (
		mu      sync.Mutex
		perGen  = map[string]int{} // probes by their half-open generation
		closed  atomic.Int64       // calls granted as a closed breaker's
		reached atomic.Int64
	)
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.Header.Get("X-Probe") != "true" {
			closed.Add(1)
		}
		mu.Lock()
		perGen[r.Header.Get("X-Gen")]++
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(provider.Close)

	cfg := probeConfig{Redis: addr, Namespace: fmt.Sprintf("hammer-%d", time.Now().UnixNano()), URL: provider.URL,
		Start: startAt(), For: int64(time.Second)}
	// The breaker is open in Redis before the workers start: every call
	// granted is a probe, and fails.
	rdb := redis.NewClient(redisstate.ClientOptions(addr, testStep))
	defer rdb.Close()
	st := redisstate.New(rdb, redisstate.Options{Namespace: cfg.Namespace, Timeout: testStep})
	open := hammerOp()
	open.Kind, open.Now, open.To = state.BreakerSet, time.Now(), circuitbreaker.OpenState
	_, err := st.Breaker(context.Background(), "breaker:hammer", open)
	require.NoError(t, err)

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
	most := 0
	for _, n := range perGen {
		most = max(most, n)
	}
	t.Logf("%d processes × %d goroutines for %s: %v; %d calls reached the provider in %d half-open generations, at most %d in one (slots %d)",
		hammerProcesses, hammerGoroutines, time.Duration(cfg.For), total, reached.Load(), len(perGen), most, hammerProbes)
	require.Zero(t, closed.Load(), "the breaker never closed: every call granted was a probe")
	require.Equal(t, int64(total["probe=true"]), reached.Load())
	require.Greater(t, len(perGen), 2, "the hammer half-opened the breaker again and again")
	require.LessOrEqual(t, most, hammerProbes, "fleet-wide probes in one half-open generation")
}
