package redisstate_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	redisstate "github.com/retrace-go/retrace/contrib/redis"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/policies/statetest"
)

// The scripts keep the rules on a real redis-server too, whose Lua is not
// miniredis's: each test on a namespace of its own.
func TestStoreConformanceOnRedisServer(t *testing.T) {
	rdb := redis.NewClient(redisstate.ClientOptions(redisAddr(t), testStep))
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := "conformance-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	n := 0
	statetest.Run(t, func(t *testing.T) state.State {
		n++
		return redisstate.New(rdb, redisstate.Options{Namespace: prefix + "-" + strconv.Itoa(n), Timeout: testStep})
	})
}

// The failure-rate window lives in the breaker's own hash: one key, under
// the namespace, expiring with the record.
func TestRateWindowIsInTheBreakersKey(t *testing.T) {
	m, st := newMini(t)
	ctx := context.Background()
	now := time.Unix(1000, 0)
	for i := range 30 {
		o := state.BreakerOp{Kind: state.BreakerAcquire, Now: now.Add(time.Duration(i) * time.Second), FailureThreshold: 5,
			Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, TTL: time.Hour, FailureRate: 0.5, MinimumCalls: 20, Window: 10 * time.Second}
		v, err := st.Breaker(ctx, "breaker:p", o)
		require.NoError(t, err)
		require.True(t, v.Granted, "call %d: one failure in three stays below the rate", i)
		o.Kind, o.Gen, o.Count = state.BreakerRecord, v.Gen, state.Success
		if i%3 == 0 {
			o.Count = state.Fail
		}
		_, err = st.Breaker(ctx, "breaker:p", o)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"t:breaker:p"}, m.Keys())
	require.Equal(t, time.Hour, m.TTL("t:breaker:p"))
	fields, err := m.HKeys("t:breaker:p")
	require.NoError(t, err)
	require.Len(t, fields, 10+3*state.RateBuckets, "the record's 10 fields and the window's 10 buckets")
	m.FastForward(2 * time.Hour)
	require.Empty(t, m.Keys())
}
