package redisstate_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	redisstate "github.com/retrace-go/retrace/contrib/redis"
	"github.com/retrace-go/retrace/policies"
)

// A worker whose breaker refuses calls itself while Redis last showed it
// open sends nothing for them; when another worker closes the breaker,
// the transition it publishes lets the first through at once, long before
// its 60 s cool-down ends. Close ends the subscription (goleak checks).
func TestTransitionsEndLocalRefusals(t *testing.T) {
	addr := redisAddr(t)
	ns := fmt.Sprintf("watch-%d", time.Now().UnixNano())
	worker := func() (*policies.CircuitBreaker[any], *redisstate.Store, *rtCounter) {
		rt := &rtCounter{}
		rdb := redis.NewClient(redisstate.ClientOptions(addr, testStep))
		rdb.AddHook(rt)
		st := redisstate.New(rdb, redisstate.Options{Namespace: ns, Timeout: testStep, Watch: true})
		t.Cleanup(func() {
			require.NoError(t, st.Close())
			_ = rdb.Close()
		})
		return policies.NewCircuitBreaker[any](policies.BreakerConfig{Name: "p", State: st, Delay: time.Minute}), st, rt
	}
	a, _, _ := worker()
	b, stB, rtB := worker()
	for range 5 {
		require.True(t, a.TryAcquirePermit())
		a.RecordFailure()
	}
	require.True(t, a.IsOpen())
	require.False(t, b.TryAcquirePermit(), "b asks Redis, which says open")
	rtB.n.Store(0)
	for range 100 {
		require.False(t, b.TryAcquirePermit())
	}
	require.Zero(t, rtB.n.Load(), "b refused 100 calls itself")
	gen := stB.Moved("breaker:p")
	a.Close()
	// The transition reaches b's subscription; awaited, not slept for.
	require.Eventually(t, func() bool { return stB.Moved("breaker:p") > gen }, 10*time.Second, time.Millisecond)
	require.True(t, b.TryAcquirePermit(), "closed by a, with 60 s of b's cool-down left")
}

// Without Watch the Store hears nothing, and Close has nothing to end.
func TestNoWatchHearsNothing(t *testing.T) {
	rdb := redis.NewClient(redisstate.ClientOptions(redisAddr(t), testStep))
	defer rdb.Close()
	st := redisstate.New(rdb, redisstate.Options{Namespace: fmt.Sprintf("nowatch-%d", time.Now().UnixNano()), Timeout: testStep})
	cb := policies.NewCircuitBreaker[any](policies.BreakerConfig{Name: "p", State: st})
	cb.Open()
	require.Zero(t, st.Moved("breaker:p"))
	require.NoError(t, st.Close())
}
