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
	s := &Store{rdb: rdb, ns: opts.Namespace, timeout: opts.Timeout}
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

func (s *Store) channel() string { return s.ns + ":moved" }

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

// breakerScript is the breaker's rule, state.BreakerEntry.Apply's (which
// statetest holds it to, step by step over random sequences), on a hash: s state, g generation, c consecutive
// failures, o opened at (µs on the callers' clock), p probes in flight,
// k successful probes, e/f/u executions, failures, successes, l when the
// last probe granted loses its slot (µs; ARGV[15] is the lease); with a failure
// rate (ARGV[12] > 0), the window's 10 buckets in slots 0–9: iN the
// bucket's index (state.RateBucket, ARGV[14]), nN its calls, xN its
// failures. A transition empties the window.
const breakerLua = `
local h = redis.call('HMGET', KEYS[1], 's','g','c','o','p','k','e','f','u','l')
local kind, now = ARGV[1], tonumber(ARGV[2])
local threshold, delay, maxProbes, successes = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local ttl, gen, probe, count, to = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9] == '1', tonumber(ARGV[10]), tonumber(ARGV[11])
local rate, minimum, bucket, lease = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
-- A field another program wrote, or a corrupt one (not a whole number, out
-- of its range), heals: the record starts again closed, in a generation of
-- its own, so that no permit of what was there counts.
local function whole(v, lo, hi)
  local n = tonumber(v)
  if v == false or v == nil then return 0, true end
  if n == nil or n ~= math.floor(n) or n < lo or (hi and n > hi) then return 0, false end
  return n, true
end
local vals, sane = {}, true
local bounds = {{0, 2}, {0}, {0}, {nil}, {0}, {0}, {0}, {0}, {0}, {nil}}
for j = 1, 10 do
  local lo, hi = bounds[j][1], bounds[j][2]
  local n, ok
  if lo == nil then
    n = tonumber(h[j]) or 0
    ok = h[j] == false or tonumber(h[j]) ~= nil
  else
    n, ok = whole(h[j], lo, hi)
  end
  vals[j] = n
  sane = sane and ok
end
local s, g, c, o, p, k, e, f, u, l = unpack(vals)
local dirty = not sane
if not sane then
  redis.call('DEL', KEYS[1])
  s, g, c, o, p, k, e, f, u, l = 0, g + 1, 0, 0, 0, 0, 0, 0, 0, 0
end
local changed, from, granted, isProbe = 0, s, 0, 0
local function transition(t)
  if s == t then return end
  changed, from = 1, s
  s, g = t, g + 1
  c, p, k, e, f, u = 0, 0, 0, 0, 0, 0
  if t == 1 then o = now end
end
-- windowAdd counts a call (fail: 1 for a failure) in the current bucket
-- and returns the calls and failures of the window that ends with it.
local function windowAdd(fail)
  local fields = {}
  for j = 0, 9 do
    fields[#fields + 1] = 'i' .. j
    fields[#fields + 1] = 'n' .. j
    fields[#fields + 1] = 'x' .. j
  end
  local w = redis.call('HMGET', KEYS[1], unpack(fields))
  local sl = bucket % 10
  local n, x = tonumber(w[3 * sl + 2]) or 0, tonumber(w[3 * sl + 3]) or 0
  if tonumber(w[3 * sl + 1]) ~= bucket then n, x = 0, 0 end
  n, x = n + 1, x + fail
  w[3 * sl + 1], w[3 * sl + 2], w[3 * sl + 3] = bucket, n, x
  redis.call('HSET', KEYS[1], 'i' .. sl, bucket, 'n' .. sl, n, 'x' .. sl, x)
  dirty = true
  local calls, failures = 0, 0
  for j = 0, 9 do
    local i = tonumber(w[3 * j + 1])
    if i and i <= bucket and i > bucket - 10 then
      calls = calls + (tonumber(w[3 * j + 2]) or 0)
      failures = failures + (tonumber(w[3 * j + 3]) or 0)
    end
  end
  return calls, failures
end
if kind == 'a' then
  if s == 1 and now >= o + delay then transition(2) end
  if s == 2 and p >= maxProbes and lease > 0 and now >= l then
    -- The probes out held their slots past their lease: they are lost (a
    -- worker died, a restart lost their record). A new half-open
    -- generation ignores their ends.
    g, p, k = g + 1, 0, 0
  end
  if s == 0 then
    granted = 1
  elseif s == 2 and p < maxProbes then
    p = p + 1
    l = now + lease
    granted, isProbe = 1, 1
  end
elseif kind == 'r' or kind == 'c' then
  if kind == 'c' then gen, probe = g, (s == 2 and p > 0) end
  if gen == g then
    if probe and p > 0 then p = p - 1 end
    if count == 1 then
      e, f = e + 1, f + 1
      if s == 0 and rate > 0 then
        local calls, failures = windowAdd(1)
        if calls > 0 and calls >= minimum and failures >= rate * calls then transition(1) end
      elseif s == 0 then
        c = c + 1
        if c >= threshold then transition(1) end
      elseif s == 2 then
        transition(1)
      end
    elseif count == 2 then
      e, u = e + 1, u + 1
      if s == 0 then
        c = 0
        if rate > 0 then windowAdd(0) end
      elseif s == 2 then
        k = k + 1
        if k >= successes then transition(0) end
      end
    end
  end
elseif kind == 's' then
  transition(to)
end
-- A step that changes nothing (a refusal, a closed breaker's grant, a
-- stale end) writes nothing, its expiry included.
local now10 = {s, g, c, o, p, k, e, f, u, l}
for j = 1, 10 do
  if now10[j] ~= vals[j] then dirty = true end
end
if dirty then
  redis.call('HSET', KEYS[1], 's', s, 'g', g, 'c', c, 'o', o, 'p', p, 'k', k, 'e', e, 'f', f, 'u', u, 'l', l)
  if changed == 1 then
    for j = 0, 9 do redis.call('HDEL', KEYS[1], 'i' .. j, 'n' .. j, 'x' .. j) end
    -- The transition is published (ARGV[16], the store's channel) for
    -- the workers that refuse calls themselves while they saw it open.
    if ARGV[16] ~= '' then redis.call('PUBLISH', ARGV[16], KEYS[1] .. ' ' .. g) end
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return {s, g, o, granted, isProbe, changed, from, e, f, u}
`

var breakerScript = redis.NewScript(breakerLua)

var opKinds = map[state.BreakerOpKind]string{
	state.BreakerAcquire: "a", state.BreakerRecord: "r", state.BreakerRecordCurrent: "c", state.BreakerSet: "s",
}

// Breaker implements state.State.
func (s *Store) Breaker(ctx context.Context, key string, op state.BreakerOp) (state.BreakerView, error) {
	args, err := s.breakerArgs(op)
	if err != nil {
		return state.BreakerView{}, err
	}
	res, err := s.run(ctx, breakerScript, []string{s.key(key)}, args...)
	if err != nil {
		return state.BreakerView{}, err
	}
	v, err := breakerView(res)
	if err != nil {
		return state.BreakerView{}, fmt.Errorf("redisstate: %s: %w", key, err)
	}
	return v, nil
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
	return []any{kind, op.Now.UnixMicro(),
		op.FailureThreshold, op.Delay.Microseconds(), op.HalfOpenProbes, op.SuccessThreshold, ttlMs(op.TTL),
		strconv.FormatUint(op.Gen, 10), probe, int(op.Count), int(op.To),
		strconv.FormatFloat(rate, 'g', -1, 64), op.MinimumCalls, state.RateBucket(op.Now, op.Window), op.ProbeLease.Microseconds(), s.channel()}, nil
}

func breakerView(res []any) (state.BreakerView, error) {
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

// drawScript takes one unit of a count. A count that is not a whole number
// of at least 0 (another program's, or corrupt) heals to 0: a negative one
// would let the task retry past its budget.
const drawLua = `
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used == nil or used < 0 or used ~= math.floor(used) then
  used = 0
  redis.call('SET', KEYS[1], 0)
end
if used >= tonumber(ARGV[1]) then return {0, used} end
used = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, used}
`

var drawScript = redis.NewScript(drawLua)

// Draw implements state.State.
func (s *Store) Draw(ctx context.Context, key string, limit int64, ttl time.Duration) (state.DrawView, error) {
	res, err := s.run(ctx, drawScript, []string{s.key(key)}, limit, ttlMs(ttl))
	if err != nil {
		return state.DrawView{}, err
	}
	v, err := drawView(res)
	if err != nil {
		return state.DrawView{}, fmt.Errorf("redisstate: %s: %w", key, err)
	}
	return v, nil
}

func drawView(res []any) (state.DrawView, error) {
	n, err := ints(res, 2)
	if err != nil {
		return state.DrawView{}, err
	}
	return state.DrawView{OK: n[0] == 1, Used: n[1]}, nil
}

// ratioScript counts calls (q) and retries (r) in the current window's hash
// (KEYS[1]), weighing the previous window's (KEYS[2]) by ARGV[1], the part
// of it still inside the sliding window.
const ratioLua = `
local cur = redis.call('HMGET', KEYS[1], 'q', 'r')
local prev = redis.call('HMGET', KEYS[2], 'q', 'r')
local weight = tonumber(ARGV[1])
local calls = (tonumber(cur[1]) or 0) + (tonumber(prev[1]) or 0) * weight
local retries = (tonumber(cur[2]) or 0) + (tonumber(prev[2]) or 0) * weight
local ok = 1
if ARGV[2] == '1' then
  if retries + 1 <= math.max(tonumber(ARGV[4]), tonumber(ARGV[3]) * calls) then
    redis.call('HINCRBY', KEYS[1], 'r', 1)
    retries = retries + 1
  else
    -- A refused retry counts nothing, and writes nothing.
    return {0, tostring(calls), tostring(retries)}
  end
else
  redis.call('HINCRBY', KEYS[1], 'q', 1)
  calls = calls + 1
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {ok, tostring(calls), tostring(retries)}
`

var ratioScript = redis.NewScript(ratioLua)

// Ratio implements state.State. Both windows' keys share a hash tag, the
// breaker's of the same name (see family), so that on a cluster they live
// on one node, the breaker's.
func (s *Store) Ratio(ctx context.Context, key string, op state.RatioOp) (state.RatioView, error) {
	keys, args := s.ratioStep(key, op)
	res, err := s.run(ctx, ratioScript, keys, args...)
	if err != nil {
		return state.RatioView{}, err
	}
	v, err := ratioView(res)
	if err != nil {
		return state.RatioView{}, fmt.Errorf("redisstate: %s: %w", key, err)
	}
	return v, nil
}

// ratioStep is the script's KEYS and ARGV for op on key.
func (s *Store) ratioStep(key string, op state.RatioOp) ([]string, []any) {
	idx, into := state.RatioWindow(op.Now, op.Window)
	base := s.key("{" + s.family(key) + "}:" + key + ":")
	retry := "0"
	if op.Retry {
		retry = "1"
	}
	return []string{base + strconv.FormatInt(idx, 10), base + strconv.FormatInt(idx-1, 10)},
		[]any{strconv.FormatFloat(1-into, 'g', -1, 64), retry, strconv.FormatFloat(op.Ratio, 'g', -1, 64), op.MinRetries, ttlMs(2 * op.Window)}
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
