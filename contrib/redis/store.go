package redisstate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/redis/go-redis/v9"

	"github.com/retrace-go/retrace/policies/state"
)

// DefaultTimeout bounds a step on Redis when nothing else does: a Lua step
// takes well under a millisecond on an idle server, but a loaded machine (a
// worker's own CPU busy, a server under a fleet) stretches it past 5 ms
// often enough that a tighter bound makes the fleet decide locally, and pay
// each worker's own failures, when Redis is fine. It is small beside a
// model call's seconds.
const DefaultTimeout = 25 * time.Millisecond

// Options configure a Store.
type Options struct {
	// Namespace prefixes every key ("retrace:breaker:openai"); "" → "retrace".
	Namespace string
	// Timeout bounds each step on Redis; 0 → DefaultTimeout. A step that
	// takes longer is abandoned and the policy decides locally.
	Timeout time.Duration
	// Watch subscribes the Store to the transitions of its breakers, which
	// every step that makes one publishes (channel "<Namespace>:moved"),
	// watched or not: a worker whose breaker refuses calls itself while
	// Redis last showed it open asks Redis again as soon as another worker
	// moves it (closes it by hand). Without it, the worker waits for the
	// cool-down it saw. The subscription holds a connection of rdb's (a
	// *redis.Client or *redis.ClusterClient); Close ends it.
	Watch bool
}

// Store is a [state.State] on Redis. It is safe for concurrent use.
type Store struct {
	rdb     redis.Scripter
	ns      string
	timeout time.Duration
	// transitions is the channel a breaker's transition is published on,
	// made once: every step names it.
	transitions string

	// With Watch: the highest generation heard per breaker key, and the
	// subscription's end.
	moved sync.Map // logical key → *atomic.Uint64
	stop  context.CancelFunc
	done  chan struct{}
}

var _ state.State = (*Store)(nil)

// New returns a Store on rdb (a *redis.Client, a cluster or ring client).
// Build the client with [ClientOptions], or with ContextTimeoutEnabled and
// no retries of its own, so that a step's timeout holds on the socket too.
func New(rdb redis.Scripter, opts Options) *Store {
	if opts.Namespace == "" {
		opts.Namespace = "retrace"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	s := &Store{rdb: rdb, ns: opts.Namespace, timeout: opts.Timeout, transitions: opts.Namespace + ":moved"}
	if sub, ok := rdb.(subscriber); ok && opts.Watch {
		ctx, stop := context.WithCancel(context.Background())
		s.stop, s.done = stop, make(chan struct{})
		ps := sub.Subscribe(ctx, s.channel())
		go s.listen(ctx, ps)
	}
	return s
}

type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

func (s *Store) channel() string { return s.transitions }

// listen keeps the generations the transitions published carry, until ctx
// ends. A message lost while the subscription reconnects costs nothing
// but the early end of a cool-down.
func (s *Store) listen(ctx context.Context, ps *redis.PubSub) {
	defer close(s.done)
	defer ps.Close()
	ch := ps.Channel()
	prefix := s.ns + ":"
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			key, g, found := strings.Cut(m.Payload, " ")
			gen, err := strconv.ParseUint(g, 10, 64)
			if !found || err != nil || !strings.HasPrefix(key, prefix) {
				continue // not a transition of this store's
			}
			v, _ := s.moved.LoadOrStore(strings.TrimPrefix(key, prefix), new(atomic.Uint64))
			for n := v.(*atomic.Uint64); ; {
				if cur := n.Load(); cur >= gen || n.CompareAndSwap(cur, gen) {
					break
				}
			}
		}
	}
}

var _ state.Watcher = (*Store)(nil)

// Moved implements state.Watcher: the highest generation of the breaker
// under key heard published, 0 without Watch.
func (s *Store) Moved(key string) uint64 {
	if v, ok := s.moved.Load(key); ok {
		return v.(*atomic.Uint64).Load()
	}
	return 0
}

// Close ends the subscription Watch started and waits for it to end. The
// Store's steps still work after it; rdb is the caller's to close.
func (s *Store) Close() error {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
	return nil
}

// ClientOptions are options for a client to Redis at addr whose every
// command ends within timeout: the context's deadline reaches the socket,
// and the client neither retries a command nor a failed dial.
func ClientOptions(addr string, timeout time.Duration) *redis.Options {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &redis.Options{
		Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, PoolTimeout: timeout,
		DialerRetries: 1,
	}
}

// ClusterOptions are [ClientOptions] for a Redis Cluster whose nodes (some
// or all of them) are addrs: every command ends within timeout, and a
// command is neither retried nor redirected more than once (a slot that
// moved is followed once; a second move is an error, and the policy decides
// locally). Each step of the Store is one script on one key, or on two keys
// that share a hash tag, so every step runs on one node.
func ClusterOptions(addrs []string, timeout time.Duration) *redis.ClusterOptions {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &redis.ClusterOptions{
		Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1, MaxRedirects: 1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, PoolTimeout: timeout,
		DialerRetries: 1,
	}
}

// ErrReply is wrapped by the error of a step whose reply the store does not
// understand (another program's data under its keys).
var ErrReply = errors.New("redisstate: unexpected reply")

func (s *Store) key(k string) string { return s.ns + ":" + k }

// family is the hash tag of a rate budget's windows: the key of the breaker
// of the same name ("retry:openai" → "<ns>:breaker:openai"), which has no
// tag of its own and so hashes as the tag does. On a Redis Cluster a
// breaker and the rate budget of its name then share a slot, and a batch
// of their steps is one script. Another key is its own family.
func (s *Store) family(key string) string {
	if name, ok := strings.CutPrefix(key, "retry:"); ok {
		return s.key("breaker:" + name)
	}
	return s.key(key)
}

// run runs one script with the store's timeout.
func (s *Store) run(ctx context.Context, sc *redis.Script, keys []string, args ...any) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := sc.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("redisstate: %s: %w", keys[0], err)
	}
	return res, nil
}

var opKinds = map[state.BreakerOpKind]string{
	state.BreakerAcquire: "a", state.BreakerRecord: "r", state.BreakerRecordCurrent: "c", state.BreakerSet: "s",
}

// Breaker implements state.State.
func (s *Store) Breaker(ctx context.Context, key string, op state.BreakerOp) (state.BreakerView, error) {
	r, err := s.step(ctx, state.Step{Key: key, Breaker: &op})
	return r.Breaker, err
}

// step makes one step, a batch of one.
func (s *Store) step(ctx context.Context, st state.Step) (state.StepResult, error) {
	out, err := s.Steps(ctx, []state.Step{st})
	if err != nil {
		return state.StepResult{}, err
	}
	return out[0], nil
}

// breakerArgs are the script's ARGV for op.
func (s *Store) breakerArgs(op state.BreakerOp) ([]any, error) {
	kind, ok := opKinds[op.Kind]
	if !ok {
		return nil, fmt.Errorf("redisstate: unknown breaker step %d", op.Kind)
	}
	rate := op.FailureRate
	if !(rate > 0) {
		rate = 0 // off, NaN included
	}
	probe := "0"
	if op.Probe {
		probe = "1"
	}
	n := max(op.N, 1)
	if n > maxEnds {
		return nil, fmt.Errorf("redisstate: a record of %d ends, more than %d in one step", op.N, maxEnds)
	}
	// An acquire is sent the first six, all it reads (the script's comment).
	args := []any{kind, op.Now.UnixMicro(), op.Delay.Microseconds(), op.HalfOpenProbes, ttlMs(op.TTL), op.ProbeLease.Microseconds()}
	if op.Kind == state.BreakerAcquire {
		return args, nil
	}
	return append(args, op.FailureThreshold, op.SuccessThreshold, strconv.FormatUint(op.Gen, 10), probe, int(op.Count), int(op.To),
		strconv.FormatFloat(rate, 'g', -1, 64), op.MinimumCalls, state.RateBucket(op.Now, op.Window), n), nil
}

// maxEnds bounds state.BreakerOp.N: a record step's ends are a loop of the
// script, which holds Redis's one thread while it runs.
const maxEnds = 1 << 16

func breakerView(res []any) (state.BreakerView, error) {
	if len(res) == grantedClosed {
		// A closed breaker's grant, the script's short reply: the rest of
		// the view is the same for every such grant.
		n, err := ints(res, grantedClosed)
		if err != nil {
			return state.BreakerView{}, err
		}
		return state.BreakerView{State: circuitbreaker.ClosedState, Gen: uint64(n[0]), OpenedAt: time.UnixMicro(n[1]), Granted: true,
			From: circuitbreaker.ClosedState, Executions: uint(n[2]), Failures: uint(n[3]), Successes: uint(n[4])}, nil
	}
	n, err := ints(res, 10)
	if err != nil {
		return state.BreakerView{}, err
	}
	return state.BreakerView{
		State: circuitbreaker.State(n[0]), Gen: uint64(n[1]), OpenedAt: time.UnixMicro(n[2]),
		Granted: n[3] == 1, Probe: n[4] == 1, Changed: n[5] == 1, From: circuitbreaker.State(n[6]),
		Executions: uint(n[7]), Failures: uint(n[8]), Successes: uint(n[9]),
	}, nil
}

// Draw implements state.State.
func (s *Store) Draw(ctx context.Context, key string, limit int64, ttl time.Duration) (state.DrawView, error) {
	r, err := s.step(ctx, state.Step{Key: key, Draw: &state.DrawOp{Limit: limit, TTL: ttl}})
	return r.Draw, err
}

func drawView(res []any) (state.DrawView, error) {
	n, err := ints(res, 2)
	if err != nil {
		return state.DrawView{}, err
	}
	return state.DrawView{OK: n[0] == 1, Used: n[1]}, nil
}

// Ratio implements state.State. Both windows' keys share a hash tag, the
// breaker's of the same name (see family), so that on a cluster they live
// on one node, the breaker's.
func (s *Store) Ratio(ctx context.Context, key string, op state.RatioOp) (state.RatioView, error) {
	r, err := s.step(ctx, state.Step{Key: key, Ratio: &op})
	return r.Ratio, err
}

// ratioStep is the script's KEYS and ARGV for op on key. A window's hash
// expires three windows after its first write: it is read through the next
// window, and a worker whose clock is behind the creator's by up to a
// window still finds it.
func (s *Store) ratioStep(key string, op state.RatioOp) ([]string, []any) {
	idx, into := state.RatioWindow(op.Now, op.Window)
	base := s.key("{" + s.family(key) + "}:" + key + ":")
	retry, calls := "0", max(op.Calls, 1)
	if op.Retry {
		retry, calls = "1", max(op.Calls, 0)
	}
	return []string{base + strconv.FormatInt(idx, 10), base + strconv.FormatInt(idx-1, 10)},
		[]any{strconv.FormatFloat(1-into, 'g', -1, 64), retry, strconv.FormatFloat(op.Ratio, 'g', -1, 64), op.MinRetries, ttlMs(3 * op.Window), calls}
}

func ratioView(res []any) (state.RatioView, error) {
	if len(res) != 3 {
		return state.RatioView{}, ErrReply
	}
	ok, _ := res[0].(int64)
	calls, err1 := strconv.ParseFloat(fmt.Sprint(res[1]), 64)
	retries, err2 := strconv.ParseFloat(fmt.Sprint(res[2]), 64)
	if err1 != nil || err2 != nil {
		return state.RatioView{}, ErrReply
	}
	return state.RatioView{OK: ok == 1, Calls: calls, Retries: retries}, nil
}

// ttlMs is a key's expiry in whole milliseconds, at least one.
func ttlMs(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// grantedClosed is the length of the script's short reply to an acquire
// that a closed breaker grants: its generation, when it last opened, and
// its executions, failures and successes.
const grantedClosed = 5

func ints(res []any, n int) ([]int64, error) {
	if len(res) != n {
		return nil, ErrReply
	}
	out := make([]int64, n)
	for i, v := range res {
		x, ok := v.(int64)
		if !ok {
			return nil, ErrReply
		}
		out[i] = x
	}
	return out, nil
}
