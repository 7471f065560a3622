package redisstate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrace-go/retrace/bench"
	redisstate "github.com/retrace-go/retrace/contrib/redis"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/telemetry"
)

// The fleet tests run worker processes: this test binary again, told what
// to do by workerEnv (a JSON workerConfig).
const workerEnv = "RETRACE_REDIS_FLEET_WORKER"

type workerConfig struct {
	Redis     string   `json:"redis"` // "" → local breakers
	Namespace string   `json:"namespace"`
	URL       string   `json:"url"`
	Origin    int64    `json:"origin"` // the fleet clock's origin, Unix ns: the workers start then
	Scale     float64  `json:"scale"`
	Cluster   []string `json:"cluster"` // the nodes of a Redis Cluster, instead of Redis
	Calls     int      `json:"calls"`
	Index     int      `json:"index"` // the worker's place in the fleet: it starts Index/8 of a period late
}

type workerReport struct {
	Outcomes    bench.FleetOutcomes `json:"outcomes"`
	SharedSpans int                 `json:"shared_spans"` // spans with retrace.state=shared
	LocalSpans  int                 `json:"local_spans"`  // with retrace.state=local
	Degraded    int                 `json:"degraded"`     // retrace.state.degraded events
	End         time.Duration       `json:"end"`          // fleet time from the origin when the worker finished
}

// Each worker calls every second of fleet time; a step on Redis may take
// 100 ms before the worker decides locally (generous, for a loaded CI machine
// running eight race-instrumented processes).
const (
	fleetEvery   = time.Second
	stateTimeout = 100 * time.Millisecond
	workers      = 8
)

// warmUp bounds a worker's connecting to Redis before the fleet starts.
const warmUp = 5 * time.Second

// warm connects rdb (every master of a cluster) and pings it until it
// answers within a step's timeout, for at most warmUp.
func warm(rdb redis.UniversalClient) error {
	giveUp := time.Now().Add(warmUp)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), warmUp)
		var err error
		if c, ok := rdb.(*redis.ClusterClient); ok {
			err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() })
		} else {
			err = rdb.Ping(ctx).Err()
		}
		cancel()
		if err == nil || time.Now().After(giveUp) {
			return err
		}
	}
}

func runWorker() int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(workerEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// The worker process's own choice: go-redis would log every failed dial
	// once Redis is killed; the spans say it.
	redis.SetLogger(quiet{})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	w := bench.FleetWorker{Name: "provider", Calls: cfg.Calls, Every: fleetEvery,
		Clock: bench.FleetClock(time.Unix(0, cfg.Origin), cfg.Scale), Options: []middleware.Option{middleware.WithTracerProvider(tp)},
		Call: bench.HTTPCall(http.DefaultClient, cfg.URL)}
	// A worker connects before the fleet starts, as a service does before
	// it takes traffic: a dial on a loaded machine may take longer than a
	// step may, and a client whose first dial failed fails its steps fast
	// for a while, which would make the run local by accident.
	var rdb redis.UniversalClient
	switch {
	case len(cfg.Cluster) > 0:
		opts := redisstate.ClusterOptions(cfg.Cluster, stateTimeout)
		opts.DialTimeout = warmUp
		rdb = redis.NewClusterClient(opts)
	case cfg.Redis != "":
		opts := redisstate.ClientOptions(cfg.Redis, stateTimeout)
		opts.DialTimeout = warmUp
		rdb = redis.NewClient(opts)
	}
	if rdb != nil {
		defer rdb.Close()
		if err := warm(rdb); err != nil {
			fmt.Fprintln(os.Stderr, "worker: Redis does not answer:", err)
			return 2
		}
		w.State = redisstate.New(rdb, redisstate.Options{Namespace: cfg.Namespace, Timeout: stateTimeout})
	}
	// Every worker starts at the origin, however long its process took to
	// start, so that the fleet's calls cover the same span of fleet time.
	// Workers are spread over one period, as a fleet's are, not in step.
	time.Sleep(time.Until(time.Unix(0, cfg.Origin)) + time.Duration(float64(fleetEvery)*float64(cfg.Index)/workers/cfg.Scale))
	rep := workerReport{Outcomes: w.Run(context.Background())}
	rep.End = w.Clock.Now().Sub(time.Unix(0, cfg.Origin))
	for _, s := range rec.Ended() {
		switch attr(s, string(telemetry.State)) {
		case telemetry.StateShared:
			rep.SharedSpans++
		case telemetry.StateLocal:
			rep.LocalSpans++
		}
		for _, e := range s.Events() {
			if e.Name == telemetry.EventStateDegraded {
				rep.Degraded++
			}
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 2
	}
	return 0
}

// provider is down: every request is a 503. It counts them.
type provider struct {
	*httptest.Server
	n atomic.Int64
}

func newProvider(t *testing.T) *provider {
	p := &provider{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.n.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(p.Close)
	return p
}

// fleet starts n worker processes and returns a function that waits for
// their reports.
func fleet(t *testing.T, n int, cfg workerConfig) func() []workerReport {
	t.Helper()
	cmds := make([]*exec.Cmd, n)
	outs := make([]*os.File, n)
	for i := range cmds {
		cfg.Index = i
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		f, err := os.CreateTemp(t.TempDir(), "worker")
		require.NoError(t, err)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"="+string(b))
		cmd.Stdout, cmd.Stderr = f, os.Stderr
		require.NoError(t, cmd.Start())
		cmds[i], outs[i] = cmd, f
	}
	return func() []workerReport {
		reps := make([]workerReport, n)
		for i, cmd := range cmds {
			require.NoError(t, cmd.Wait(), "worker %d", i)
			b, err := os.ReadFile(outs[i].Name())
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &reps[i]), "worker %d: %s", i, b)
			_ = outs[i].Close()
		}
		return reps
	}
}

// startAt is when a fleet's workers start: long enough from now for eight
// race-instrumented processes to be up.
func startAt() int64 { return time.Now().Add(2 * time.Second).UnixNano() }

// redisServer is a redis-server this test starts on a free port of
// 127.0.0.1 and stops by its PID.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(t testing.TB) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed; CI installs it (.ci/run)")
		}
		t.Skip("redis-server is not installed (apt-get install redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	s := &redisServer{addr: "127.0.0.1:" + strconv.Itoa(port), done: make(chan struct{})}
	s.cmd = exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no")
	require.NoError(t, s.cmd.Start())
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.kill)
	// Await the server: ping until it answers, or it exits.
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer rdb.Close()
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		if rdb.Ping(context.Background()).Err() == nil {
			return s
		}
		select {
		case <-s.done:
			t.Fatal("redis-server exited at start")
		case <-time.After(backoff):
		}
	}
}

// kill stops the server by its PID and waits for it to exit.
func (s *redisServer) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// redisAddr is the server CI started (RETRACE_REDIS_ADDR), else one of the
// test's own.
func redisAddr(t testing.TB) string {
	if a := os.Getenv("RETRACE_REDIS_ADDR"); a != "" {
		return a
	}
	return startRedis(t).addr
}

func sum(reps []workerReport) (calls int, outcomes bench.FleetOutcomes, shared, local, degraded int) {
	outcomes = bench.FleetOutcomes{}
	for _, r := range reps {
		for o, n := range r.Outcomes {
			outcomes[o] += n
		}
		shared += r.SharedSpans
		local += r.LocalSpans
		degraded += r.Degraded
	}
	return outcomes.Total(), outcomes, shared, local, degraded
}

// Eight worker processes call a provider that is down, 300 calls each a
// second of fleet time apart (60 s cool-downs, at 100× speed; the calls' own
// cost stretches the run). With breakers of their own, each spends its own 5
// failures and its own probe per cool-down; with one breaker in Redis, the
// fleet spends 5 failures, the calls already in flight when it opened, and
// one probe per cool-down.
func TestFleetOfProcessesSharesOneBreaker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	compareFleets(t, workerConfig{Redis: redisAddr(t)})
}

// The same fleet on a Redis Cluster of three masters: the breaker's record
// is on one of them, and the fleet pays what it pays on one Redis.
func TestFleetOfProcessesOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	compareFleets(t, workerConfig{Cluster: startCluster(t)})
}

// compareFleets runs the fleet twice, with a breaker per process and with
// one shared where shared says (a Redis, a cluster), and holds the shared
// one to the fleet's bound.
func compareFleets(t *testing.T, shared workerConfig) {
	const calls, scale = 300, 100.0

	run := func(where workerConfig) (int64, []workerReport) {
		p := newProvider(t)
		cfg := workerConfig{Redis: where.Redis, Cluster: where.Cluster, Namespace: fmt.Sprintf("retrace-test-%d-%d", os.Getpid(), time.Now().UnixNano()),
			URL: p.URL, Origin: startAt(), Scale: scale, Calls: calls}
		reps := fleet(t, workers, cfg)()
		return p.n.Load(), reps
	}
	localDown, localReps := run(workerConfig{})
	sharedDown, sharedReps := run(shared)
	_, _, _, _, degraded := sum(sharedReps)
	// A decision made locally (a step that did not answer in time on a
	// loaded machine) is the worker's own breaker's: each may let a call
	// through that the shared one would have refused.
	var end time.Duration
	for _, r := range sharedReps {
		end = max(end, r.End)
	}
	cooldowns := int(end/(60*time.Second)) + 1
	bound := int64(5 + cooldowns + workers - 1 + degraded)
	t.Logf("downstream requests, %d processes × %d calls: local breakers %d, shared breaker %d (bound %d over %s of fleet time); degraded decisions %d",
		workers, calls, localDown, sharedDown, bound, end.Round(time.Second), degraded)

	for _, reps := range [][]workerReport{localReps, sharedReps} {
		n, outcomes, _, _, _ := sum(reps)
		require.Equal(t, workers*calls, n, "every call ends with an outcome")
		require.Zero(t, outcomes["unknown"])
	}
	// The fleet's bound: the threshold, one probe per cool-down, the calls
	// already in flight in the other workers when the breaker opened, and
	// the decisions made locally.
	require.LessOrEqual(t, sharedDown, bound)
	require.GreaterOrEqual(t, sharedDown, int64(5))
	// Each local breaker pays the same on its own, whatever the machine's
	// speed (how many cool-downs a run spans depends on it; the bound above
	// counts them).
	require.GreaterOrEqual(t, localDown, int64(workers*5))
	require.Greater(t, localDown, sharedDown)
	_, _, sharedSpans, _, _ := sum(sharedReps)
	require.Positive(t, sharedSpans, "the spans say the shared state decided")
}

// Redis is killed while eight workers run: every call still ends with a known
// outcome, each worker goes on with its local breaker, and the spans show the
// degradation.
func TestFleetOutlivesRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	srv := startRedis(t)
	const calls, scale = 300, 100.0
	p := newProvider(t)
	cfg := workerConfig{Redis: srv.addr, Namespace: "retrace-outage", URL: p.URL, Origin: startAt(), Scale: scale, Calls: calls}
	wait := fleet(t, workers, cfg)
	// Redis goes once the fleet's breaker has opened in it: the failures
	// that opened it were recorded there, whatever the machine's speed.
	awaitOpen(t, srv.addr, "retrace-outage:breaker:provider")
	srv.kill()
	atKill := p.n.Load()
	reps := wait()
	n, outcomes, shared, local, degraded := sum(reps)
	t.Logf("Redis killed after %d downstream requests; %d after: %d calls, outcomes %v; spans shared %d, local %d; degraded events %d",
		atKill, p.n.Load()-atKill, n, outcomes, shared, local, degraded)
	require.Equal(t, workers*calls, n, "no call lost")
	require.Zero(t, outcomes["unknown"])
	for i, r := range reps {
		require.Positive(t, r.Degraded, "worker %d saw Redis go", i)
		require.Positive(t, r.LocalSpans, "worker %d decided locally", i)
	}
	require.Positive(t, shared)
	for o := range outcomes {
		require.Contains(t, []string{string(telemetry.OutcomeRejected), string(telemetry.OutcomeFailedExhausted), string(telemetry.OutcomeBudgetExhausted)}, o)
	}
}

// awaitOpen waits until the breaker record at key in the Redis at addr is
// open. A breaker that never opens is a broken run, reported, not awaited
// for ever.
func awaitOpen(t *testing.T, addr, key string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	giveUp := time.Now().Add(time.Minute)
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 20*time.Millisecond) {
		if s, err := rdb.HGet(context.Background(), key, "s").Int(); err == nil && s == int(circuitbreaker.OpenState) {
			return
		}
		if time.Now().After(giveUp) {
			t.Fatal("the fleet's breaker never opened in Redis")
		}
		<-time.After(backoff)
	}
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
