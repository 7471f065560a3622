package redisstate_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/clock"
	redisstate "github.com/retrace-go/retrace/contrib/redis"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/policies/statetest"
	"github.com/retrace-go/retrace/telemetry"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(runWorker())
	}
	if os.Getenv(probeEnv) != "" {
		os.Exit(runProbeWorker())
	}
	goleak.VerifyTestMain(m)
}

func newMini(t *testing.T) (*miniredis.Miniredis, *redisstate.Store) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(redisstate.ClientOptions(m.Addr(), testStep))
	t.Cleanup(func() { _ = rdb.Close() })
	return m, redisstate.New(rdb, redisstate.Options{Namespace: "t", Timeout: testStep})
}

func TestStoreConformance(t *testing.T) {
	statetest.Run(t, func(t *testing.T) state.State {
		_, st := newMini(t)
		return st
	})
}

func TestKeysAreNamespacedAndExpire(t *testing.T) {
	m, st := newMini(t)
	ctx := context.Background()
	// A failure writes the breaker's record (an acquire of a closed breaker
	// changes nothing, and writes nothing).
	_, err := st.Breaker(ctx, "breaker:p", state.BreakerOp{Kind: state.BreakerRecordCurrent, Count: state.Fail, Now: time.Unix(0, 0),
		FailureThreshold: 5, Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, TTL: time.Hour})
	require.NoError(t, err)
	_, err = st.Draw(ctx, "task:t1", 6, 24*time.Hour)
	require.NoError(t, err)
	_, err = st.Ratio(ctx, "retry:p", state.RatioOp{Now: time.Unix(95, 0), Window: 10 * time.Second, Ratio: 0.1, MinRetries: 3})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"t:breaker:p", "t:task:t1", "t:{t:breaker:p}:retry:p:9"}, m.Keys())
	require.Equal(t, time.Hour, m.TTL("t:breaker:p"))
	require.Equal(t, 24*time.Hour, m.TTL("t:task:t1"))
	require.Equal(t, 30*time.Second, m.TTL("t:{t:breaker:p}:retry:p:9"), "three windows from its first write")
	m.FastForward(5 * time.Second)
	_, err = st.Ratio(ctx, "retry:p", state.RatioOp{Now: time.Unix(99, 0), Window: 10 * time.Second, Ratio: 0.1, MinRetries: 3})
	require.NoError(t, err)
	require.Equal(t, 25*time.Second, m.TTL("t:{t:breaker:p}:retry:p:9"), "a later write keeps the expiry its first set")
	m.FastForward(25 * time.Hour)
	require.Empty(t, m.Keys())
}

func TestStepsFailWhenRedisDoes(t *testing.T) {
	m, st := newMini(t)
	m.SetError("LOADING Redis is loading the dataset in memory")
	_, err := st.Draw(context.Background(), "task:t", 1, time.Hour)
	require.Error(t, err)
	m.SetError("")
	m.Close()
	_, err = st.Breaker(context.Background(), "breaker:p", state.BreakerOp{Kind: state.BreakerAcquire, Now: time.Now(), TTL: time.Hour})
	require.Error(t, err)
	require.Equal(t, "unavailable", state.DegradedType(err))
}

// A step that Redis does not answer within the timeout ends at the timeout:
// the client is given a server that accepts and never replies.
func TestStepTimesOut(t *testing.T) {
	srv := newSilentServer(t)
	rdb := redis.NewClient(redisstate.ClientOptions(srv, 20*time.Millisecond))
	defer rdb.Close()
	st := redisstate.New(rdb, redisstate.Options{Timeout: 20 * time.Millisecond})
	_, err := st.Draw(context.Background(), "task:t", 1, time.Hour)
	require.Error(t, err)
	require.True(t, errors.Is(err, context.DeadlineExceeded) || isTimeout(err), "%v", err)
	require.Equal(t, "timeout", state.DegradedType(err))
}

// spans runs calls through a layer with a shared breaker and budgets on st
// and returns the spans.
func spans(t *testing.T, st state.State, calls int) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	clk := clock.NewVirtual(time.Unix(0, 0))
	retry := policies.ToolRetry
	retry.Clock = clk
	retry.Budget = policies.NewRetryBudget(policies.RetryBudgetConfig{Name: "p", State: st, Clock: clk})
	layer := middleware.Layer[int, int]("tool", middleware.Spec[int]{
		Policies: []failsafe.Policy[int]{policies.NewRetry[int](retry), policies.NewCircuitBreaker[int](policies.BreakerConfig{Name: "p", State: st, Clock: clk})},
	}, middleware.WithTracerProvider(tp), middleware.WithClock(clk))
	h := layer(func(context.Context, int) (int, error) { return 0, &policies.Error{StatusCode: 503} })
	ctx := policies.WithSharedTaskBudget(context.Background(), st, "task-1", 6)
	for range calls {
		_, err := h(ctx, 0)
		require.Error(t, err)
	}
	return rec.Ended()
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

func TestSpansSayShared(t *testing.T) {
	_, st := newMini(t)
	shared, degraded := 0, 0
	for _, s := range spans(t, st, 2) {
		if attr(s, string(telemetry.State)) == telemetry.StateShared {
			shared++
		}
		require.NotEqual(t, telemetry.StateLocal, attr(s, string(telemetry.State)), s.Name())
		for _, e := range s.Events() {
			if e.Name == telemetry.EventStateDegraded {
				degraded++
			}
		}
	}
	require.Positive(t, shared)
	require.Zero(t, degraded)
}

// With Redis down every call still ends, decided locally: the spans say
// retrace.state=local, with a degraded event naming the policy and why.
func TestSpansSayLocalWhenRedisIsDown(t *testing.T) {
	m, _ := newMini(t)
	rdb := redis.NewClient(redisstate.ClientOptions(m.Addr(), 20*time.Millisecond))
	defer rdb.Close()
	st := redisstate.New(rdb, redisstate.Options{Timeout: 20 * time.Millisecond})
	m.Close()
	local := 0
	policiesSeen := map[string]bool{}
	ss := spans(t, st, 3)
	for _, s := range ss {
		if attr(s, string(telemetry.State)) == telemetry.StateLocal {
			local++
		}
		for _, e := range s.Events() {
			if e.Name != telemetry.EventStateDegraded {
				continue
			}
			for _, a := range e.Attributes {
				if a.Key == telemetry.Policy {
					policiesSeen[a.Value.AsString()] = true
				}
				if a.Key == telemetry.StateError {
					require.Contains(t, []string{telemetry.StateUnavailable, telemetry.StateTimeout}, a.Value.AsString())
				}
			}
		}
	}
	require.Positive(t, local)
	require.Equal(t, map[string]bool{telemetry.PolicyCircuitBreaker: true, telemetry.PolicyBudget: true}, policiesSeen)
	var outcomes []string
	for _, s := range ss {
		if o := attr(s, string(telemetry.Outcome)); o != "" {
			outcomes = append(outcomes, o)
		}
	}
	require.Len(t, outcomes, 3, "every call ended with an outcome")
}

// Workers on one Redis share one breaker: it opens after the threshold of
// failures counted across them and refuses everyone.
func TestBreakersShareThroughRedis(t *testing.T) {
	_, st := newMini(t)
	clk := clock.NewFake(time.Unix(0, 0))
	var bs []*policies.CircuitBreaker[int]
	for range 3 {
		bs = append(bs, policies.NewCircuitBreaker[int](policies.BreakerConfig{Name: "p", State: st, Clock: clk}))
	}
	for i := range 5 {
		require.True(t, bs[i%3].TryAcquirePermit())
		bs[i%3].RecordFailure()
	}
	for _, b := range bs {
		require.False(t, b.TryAcquirePermit())
		require.Equal(t, circuitbreaker.OpenState, b.State())
		require.Equal(t, time.Minute, b.RemainingDelay())
	}
}

// The workers of one task draw from one count.
func TestTaskBudgetSharedThroughRedis(t *testing.T) {
	_, st := newMini(t)
	a := policies.TaskBudgetFrom(policies.WithSharedTaskBudget(context.Background(), st, "task-9", 4))
	b := policies.TaskBudgetFrom(policies.WithSharedTaskBudget(context.Background(), st, "task-9", 4))
	got := 0
	for range 3 {
		for _, x := range []*policies.TaskBudget{a, b} {
			if x.TryDraw() {
				got++
			}
		}
	}
	require.Equal(t, 4, got)
	require.Equal(t, 4, b.Used())
	require.Equal(t, 2, a.Denied()+b.Denied())
}
