package redisstate_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace/noop"

	redisstate "github.com/retrace-go/retrace/contrib/redis"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
)

// The cost of a fleet's shared state per call, measured from outside: the
// round trips a worker waits for (counted by a hook on its client: a
// command or a pipeline is one) and the commands Redis runs for them
// (INFO commandstats, reset before each case; a script's own commands
// count), for a call through a retry with a shared task budget and a shared
// rate budget around a shared breaker (5 failures, 60 s cool-down).

// rtCase is one case of the measure: how its calls end.
type rtCase struct {
	name  string
	fail  func(i int) bool // the downstream fails attempt i (counted from 0)
	open  bool             // the breaker is open before the case starts
	lease int              // the breaker's LeaseCalls
}

var rtCases = []rtCase{
	{name: "success", fail: func(int) bool { return false }},
	{name: "refusal", fail: func(int) bool { return false }, open: true},
	// One call in ten fails its first attempt and succeeds on its retry.
	{name: "fail10", fail: func(i int) bool { return i%11 == 0 }},
	// With a lease of 10 calls: one ask in 11 calls.
	{name: "success-lease", fail: func(int) bool { return false }, lease: 10},
	{name: "fail10-lease", fail: func(i int) bool { return i%11 == 0 }, lease: 10},
}

// rtCounter counts the round trips of a client: each command sent alone,
// or each pipeline, is one.
type rtCounter struct{ n atomic.Int64 }

func (c *rtCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *rtCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *rtCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// rtWorker is one worker's layer on a Store of its own namespace.
type rtWorker struct {
	rdb   redis.UniversalClient
	rt    *rtCounter
	store *redisstate.Store
	call  func(ctx context.Context) error
	cb    *policies.CircuitBreaker[struct{}]
	ctx   context.Context // carries the shared task budget
	n     int             // downstream attempts so far
}

func newRTWorker(t testing.TB, addr string, c rtCase) *rtWorker {
	return newRTWorkerOn(t, redis.NewClient(redisstate.ClientOptions(addr, testStep)), c)
}

// newRTWorkerOn is a worker on rdb (a client or a cluster's), which it
// closes when the test ends.
func newRTWorkerOn(t testing.TB, rdb redis.UniversalClient, c rtCase) *rtWorker {
	w := &rtWorker{rt: &rtCounter{}, rdb: rdb}
	w.rdb.AddHook(w.rt)
	t.Cleanup(func() { _ = w.rdb.Close() })
	ns := fmt.Sprintf("rt-%s-%d", c.name, time.Now().UnixNano())
	w.store = redisstate.New(w.rdb, redisstate.Options{Namespace: ns, Timeout: testStep})
	w.cb = policies.NewCircuitBreaker[struct{}](policies.BreakerConfig{Name: "provider", State: w.store, FailureThreshold: 5, Delay: 60 * time.Second, LeaseCalls: c.lease})
	retry := policies.RetryConfig{MaxAttempts: 3, Budget: policies.NewRetryBudget(policies.RetryBudgetConfig{Name: "provider", State: w.store, MinRetries: 1 << 20})}
	layer := middleware.Layer[struct{}, struct{}]("model", middleware.Spec[struct{}]{
		Policies: []failsafe.Policy[struct{}]{policies.NewRetry[struct{}](retry), w.cb},
	}, middleware.WithTracerProvider(noop.NewTracerProvider()))
	h := layer(func(context.Context, struct{}) (struct{}, error) {
		i := w.n
		w.n++
		if c.fail(i) {
			return struct{}{}, &policies.Error{Class: policies.Transient, Type: "overloaded", Reason: "test"}
		}
		return struct{}{}, nil
	})
	w.call = func(ctx context.Context) error { _, err := h(ctx, struct{}{}); return err }
	w.ctx = policies.WithSharedTaskBudget(context.Background(), w.store, "task-"+ns, 1<<30)
	if c.open {
		w.cb.Open()
	}
	// The scripts are loaded before the case: the measure is of the steady
	// state, not of the first call's NOSCRIPT.
	for range 3 {
		_ = w.call(w.ctx)
	}
	return w
}

// commandstats returns the calls per command since the last CONFIG
// RESETSTAT, without the measure's own.
func commandstats(t testing.TB, admin *redis.Client) map[string]int64 {
	info, err := admin.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err, line)
		switch name {
		case "info", "config|resetstat", "ping", "hello", "client|setinfo", "client|setname":
		default:
			out[name] = n
		}
	}
	return out
}

// writes are the commands that change data.
var writes = map[string]bool{"hset": true, "hdel": true, "pexpire": true, "expire": true, "incr": true, "incrby": true,
	"hincrby": true, "hincrbyfloat": true, "set": true, "del": true, "publish": true}

type rtResult struct {
	RoundTrips, Commands, Writes float64 // per call
	Stats                        map[string]int64
}

// measure makes calls calls of case c on a fresh worker and returns what
// they cost per call.
func measure(t testing.TB, addr string, c rtCase, calls int) rtResult {
	admin := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer admin.Close()
	w := newRTWorker(t, addr, c)
	require.NoError(t, admin.ConfigResetStat(context.Background()).Err())
	w.rt.n.Store(0)
	for range calls {
		_ = w.call(w.ctx)
	}
	return perCall(commandstats(t, admin), w.rt.n.Load(), calls)
}

// measureGoBreaker is measure for gobreaker v2's distributed breaker.
func measureGoBreaker(t testing.TB, addr string, c rtCase, calls int) rtResult {
	admin := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer admin.Close()
	rt := &rtCounter{}
	rdb := redis.NewClient(redisstate.ClientOptions(addr, testStep))
	defer rdb.Close()
	rdb.AddHook(rt)
	call := newGoBreaker(t, rdb, c)
	require.NoError(t, admin.ConfigResetStat(context.Background()).Err())
	rt.n.Store(0)
	for range calls {
		call()
	}
	return perCall(commandstats(t, admin), rt.n.Load(), calls)
}

// perCall is what calls calls cost, per call: the round trips counted,
// and the commands and writes Redis ran (stats).
func perCall(stats map[string]int64, roundTrips int64, calls int) rtResult {
	r := rtResult{RoundTrips: float64(roundTrips) / float64(calls), Stats: stats}
	var cmds, wr int64
	for name, n := range stats {
		cmds += n
		if writes[name] {
			wr += n
		}
	}
	r.Commands, r.Writes = float64(cmds)/float64(calls), float64(wr)/float64(calls)
	return r
}

// The counts are the machine's no more than the rules are: they are the
// test's assertions, the ceiling each case is held to.
func TestRoundTripsPerCall(t *testing.T) {
	addr := redisAddr(t)
	const calls = 1100
	// Before the batches (one script per step, each waited for): success
	// 3.00 round trips, 13.00 commands, 6.00 writes per call; refusal
	// 2.00, 9.00, 4.00; one call in ten failing once 3.40, 14.70, 6.80.
	want := map[string]struct{ rt, writes float64 }{
		// The acquire; every 16th carries the 16 successes held back and
		// the rate budget's record of 16 calls (3 writes: the breaker's
		// fields and expiry, the window's count).
		"success": {1, 0.25},
		// The breaker refuses itself until its cool-down ends.
		"refusal": {0, 0},
		// A failure adds one batch: the successes before it, its record,
		// the task's draw, the rate budget's retry carrying the calls held
		// back; and the retry's acquire.
		"fail10": {1.2, 0.7},
		// One ask, carrying the leased calls' records, per lease.
		"success-lease": {0.1, 0.3},
		// A failure ends the lease: its batch, and the retry's ask.
		"fail10-lease": {0.2, 0.7},
	}
	for _, c := range rtCases {
		if c.lease == 0 {
			gb := measureGoBreaker(t, addr, c, calls)
			t.Logf("gobreaker v2 %-8s round trips/call %.2f, commands/call %.2f, writes/call %.2f: %v", c.name, gb.RoundTrips, gb.Commands, gb.Writes, gb.Stats)
			require.GreaterOrEqual(t, gb.RoundTrips, 4.0, "gobreaker's distributed breaker: GET, lock, SET, unlock")
		}
		r := measure(t, addr, c, calls)
		t.Logf("%-8s round trips/call %.2f, commands/call %.2f, writes/call %.2f: %v", c.name, r.RoundTrips, r.Commands, r.Writes, r.Stats)
		require.LessOrEqual(t, r.RoundTrips, want[c.name].rt+0.01, c.name)
		require.LessOrEqual(t, r.Writes, want[c.name].writes+0.01, c.name)
	}
}

// BenchmarkFleetCall times each case's call against one raw EVALSHA of a
// trivial script on the same Redis, interleaved call by call, and reports
// the p50s' ratio: the number to read, as the machine's speed cancels out.
func BenchmarkFleetCall(b *testing.B) {
	addr := redisAddr(b)
	for _, c := range rtCases {
		b.Run(c.name, func(b *testing.B) {
			w := newRTWorker(b, addr, c)
			raw := redis.NewClient(redisstate.ClientOptions(addr, testStep))
			defer raw.Close()
			sc := redis.NewScript(`return 1`)
			ctx := context.Background()
			require.NoError(b, sc.Run(ctx, raw, []string{"k"}).Err())
			gb := newGoBreaker(b, raw, c)
			var calls, raws, gbs []time.Duration
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				_ = sc.EvalSha(ctx, raw, []string{"k"}).Err()
				t1 := time.Now()
				_ = w.call(w.ctx)
				t2 := time.Now()
				gb()
				t3 := time.Now()
				raws, calls, gbs = append(raws, t1.Sub(t0)), append(calls, t2.Sub(t1)), append(gbs, t3.Sub(t2))
			}
			b.ReportMetric(float64(p50(calls))/float64(p50(raws)), "x-raw-evalsha")
			b.ReportMetric(float64(p50(calls))/float64(p50(gbs)), "x-gobreaker")
			// A lease makes most calls local and one in many ask: the
			// mean says what a call costs on the whole.
			b.ReportMetric(float64(total(calls))/float64(total(raws)), "x-raw-evalsha-mean")
			b.ReportMetric(float64(total(calls))/float64(total(gbs)), "x-gobreaker-mean")
			b.ReportMetric(float64(p50(calls)), "p50-ns/call")
		})
	}
}

func total(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

func p50(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// gbStore is gobreaker v2's SharedDataStore on go-redis, as its own example
// builds it: a lock is a key set if absent, with an expiry; the state is a
// JSON value.
type gbStore struct{ rdb *redis.Client }

func (s gbStore) Lock(name string) error {
	ok, err := s.rdb.SetNX(context.Background(), name, "1", 5*time.Second).Result()
	if err == nil && !ok {
		return fmt.Errorf("%s is locked", name)
	}
	return err
}

func (s gbStore) Unlock(name string) error { return s.rdb.Del(context.Background(), name).Err() }

func (s gbStore) GetData(name string) ([]byte, error) {
	b, err := s.rdb.Get(context.Background(), name).Bytes()
	if err == redis.Nil {
		return nil, nil
	}
	return b, err
}

func (s gbStore) SetData(name string, data []byte) error {
	return s.rdb.Set(context.Background(), name, data, 0).Err()
}

// newGoBreaker returns one call of case c through gobreaker v2's
// distributed breaker on rdb (5 consecutive failures, 60 s cool-down), no
// retry: the breaker alone.
func newGoBreaker(t testing.TB, rdb *redis.Client, c rtCase) func() {
	name := fmt.Sprintf("gb-%s-%d", c.name, time.Now().UnixNano())
	cb, err := gobreaker.NewDistributedCircuitBreaker[struct{}](gbStore{rdb}, gobreaker.Settings{Name: name, Timeout: 60 * time.Second,
		ReadyToTrip: func(n gobreaker.Counts) bool { return n.ConsecutiveFailures >= 5 }})
	require.NoError(t, err)
	errDown := fmt.Errorf("down")
	if c.open {
		for range 5 {
			_, _ = cb.Execute(func() (struct{}, error) { return struct{}{}, errDown })
		}
	}
	n := 0
	return func() {
		i := n
		n++
		_, _ = cb.Execute(func() (struct{}, error) {
			if c.fail(i) {
				return struct{}{}, errDown
			}
			return struct{}{}, nil
		})
	}
}

// A step that changes nothing writes nothing: a refused acquire, a refused
// draw, a refused retry, a stale record. The hash and its expiry stay as
// they were, and Redis runs no write command for them.
func TestRefusalsWriteNothing(t *testing.T) {
	addr := redisAddr(t)
	admin := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer admin.Close()
	rdb := redis.NewClient(redisstate.ClientOptions(addr, testStep))
	defer rdb.Close()
	ns := fmt.Sprintf("nowrite-%d", time.Now().UnixNano())
	st := redisstate.New(rdb, redisstate.Options{Namespace: ns, Timeout: testStep})
	ctx := context.Background()
	now := time.Now()
	o := state.BreakerOp{Now: now, FailureThreshold: 1, Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, TTL: time.Hour}
	fail := o
	fail.Kind, fail.Count = state.BreakerRecordCurrent, state.Fail
	v, err := st.Breaker(ctx, "breaker:p", fail)
	require.NoError(t, err)
	require.Equal(t, "open", v.State.String())
	_, err = st.Draw(ctx, "task:t", 1, time.Hour)
	require.NoError(t, err)
	ratio := state.RatioOp{Retry: true, Now: now, Window: time.Minute, Ratio: 0, MinRetries: 0}
	key := ns + ":breaker:p"
	before, err := admin.HGetAll(ctx, key).Result()
	require.NoError(t, err)
	ttl, err := admin.PTTL(ctx, key).Result()
	require.NoError(t, err)

	require.NoError(t, admin.ConfigResetStat(ctx).Err())
	acquire := o
	acquire.Kind, acquire.Now = state.BreakerAcquire, now.Add(time.Second)
	stale := o
	stale.Kind, stale.Gen, stale.Count, stale.Now = state.BreakerRecord, v.Gen-1, state.Fail, now.Add(time.Second)
	for range 10 {
		v, err := st.Breaker(ctx, "breaker:p", acquire)
		require.NoError(t, err)
		require.False(t, v.Granted)
		_, err = st.Breaker(ctx, "breaker:p", stale)
		require.NoError(t, err)
		d, err := st.Draw(ctx, "task:t", 1, time.Hour)
		require.NoError(t, err)
		require.False(t, d.OK)
		r, err := st.Ratio(ctx, "retry:p", ratio)
		require.NoError(t, err)
		require.False(t, r.OK)
		res, err := st.Steps(ctx, []state.Step{{Key: "retry:p", Ratio: &ratio}, {Key: "breaker:p", Breaker: &acquire}})
		require.NoError(t, err)
		require.False(t, res[1].Breaker.Granted)
	}
	stats := commandstats(t, admin)
	for name, n := range stats {
		require.False(t, writes[name], "%s ran %d times: %v", name, n, stats)
	}
	require.Positive(t, stats["evalsha"]+stats["eval"], "the steps ran: %v", stats)
	after, err := admin.HGetAll(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, before, after)
	ttl2, err := admin.PTTL(ctx, key).Result()
	require.NoError(t, err)
	require.LessOrEqual(t, ttl2, ttl, "the expiry was not refreshed")
}
