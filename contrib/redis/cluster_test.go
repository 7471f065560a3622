package redisstate_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	redisstate "github.com/retrace-go/retrace/contrib/redis"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/policies/statetest"
)

// startCluster starts a Redis Cluster of three masters from redis-server,
// each on a free port of 127.0.0.1 in a directory of the test's, joined
// with redis-cli --cluster create, and returns their addresses once the
// cluster says it is ok. The servers are stopped by their PIDs.
func startCluster(t *testing.T) []string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	cli, cliErr := exec.LookPath("redis-cli")
	if err != nil || cliErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server and redis-cli are not installed; CI installs them (.ci/run)")
		}
		t.Skip("redis-server is not installed (apt-get install redis-server)")
	}
	var addrs []string
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		dir := filepath.Join(t.TempDir(), strconv.Itoa(i))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--dir", dir)
		require.NoError(t, cmd.Start())
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
		addr := "127.0.0.1:" + strconv.Itoa(port)
		awaitPing(t, addr, done)
		addrs = append(addrs, addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	out, err := exec.Command(cli, append(args, "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	// Await the cluster: every node must know every slot. A cluster that
	// never agrees is a broken setup, reported, not awaited for ever.
	giveUp := time.Now().Add(time.Minute)
	for _, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		for backoff := time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
			info, err := rdb.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(giveUp) {
				t.Fatalf("the cluster at %s is not ok: %v %s", addr, err, info)
			}
			<-time.After(backoff)
		}
		_ = rdb.Close()
	}
	return addrs
}

// awaitPing pings addr until it answers, or its server exits.
func awaitPing(t *testing.T, addr string, exited <-chan struct{}) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		if rdb.Ping(context.Background()).Err() == nil {
			return
		}
		select {
		case <-exited:
			t.Fatal("redis-server exited at start")
		case <-time.After(backoff):
		}
	}
}

// The Store keeps every rule on a Redis Cluster of three masters, through
// the cluster client: each step is one script on one slot, wherever its key
// lands.
func TestStoreConformanceOnACluster(t *testing.T) {
	addrs := startCluster(t)
	rdb := redis.NewClusterClient(redisstate.ClusterOptions(addrs, testStep))
	t.Cleanup(func() { _ = rdb.Close() })
	n := 0
	statetest.Run(t, func(t *testing.T) state.State {
		n++
		return redisstate.New(rdb, redisstate.Options{Namespace: fmt.Sprintf("cluster-%d", n), Timeout: testStep})
	})
	// The keys of one store are spread over the masters: the test is of a
	// cluster, not of one node.
	nodes := map[string]bool{}
	for i := range 64 {
		key := fmt.Sprintf("cluster-spread:breaker:%d", i)
		st := redisstate.New(rdb, redisstate.Options{Namespace: "cluster-spread", Timeout: testStep})
		_, err := st.Breaker(context.Background(), fmt.Sprintf("breaker:%d", i), state.BreakerOp{Kind: state.BreakerAcquire,
			Now: time.Unix(0, 0), FailureThreshold: 5, Delay: time.Minute, HalfOpenProbes: 1, SuccessThreshold: 1, TTL: time.Hour})
		require.NoError(t, err)
		c, err := rdb.MasterForKey(context.Background(), key)
		require.NoError(t, err)
		nodes[c.Options().Addr] = true
	}
	require.Len(t, nodes, 3)
}

// On a cluster too a call costs one round trip: the breaker and the rate
// budget of its name share a slot, so the admit is one script on one node;
// a failure's batch is cut where the task's budget lives on another slot.
func TestRoundTripsOnACluster(t *testing.T) {
	addrs := startCluster(t)
	for _, c := range rtCases {
		rdb := redis.NewClusterClient(redisstate.ClusterOptions(addrs, testStep))
		require.NoError(t, warm(rdb))
		w := newRTWorkerOn(t, rdb, c)
		w.rt.n.Store(0)
		const calls = 550
		for range calls {
			_ = w.call(w.ctx)
		}
		rt := float64(w.rt.n.Load()) / calls
		t.Logf("%-8s round trips/call on a cluster %.2f", c.name, rt)
		// One call in ten fails once: its batch is three parts (the
		// breaker's slot, the task's, the breaker's), and its retry's
		// acquire one more.
		want := map[string]float64{"success": 1, "refusal": 0, "fail10": 1.4, "success-lease": 0.1, "fail10-lease": 0.4}[c.name]
		require.LessOrEqual(t, rt, want+0.01, c.name)
	}
}
