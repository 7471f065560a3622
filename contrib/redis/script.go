package redisstate

import "github.com/redis/go-redis/v9"

// script makes a batch of steps in order, atomically: every step of the
// Store, alone or in a batch, is one run of it. ARGV[1] is the number of
// steps and ARGV[2] the channel a breaker's transition is published on
// (empty for none); then, for each step, its kind (b breaker, d draw, q
// ratio), '1' if it is a gate, the number of its arguments and the
// arguments. KEYS are the steps' keys in order (a ratio step has two). It
// returns each step's reply, or an empty one for a step a gate skipped. A
// gate refuses as state.Step.Refused says: an acquire that grants nothing,
// a record that leaves the breaker open and cooling down at its time, a
// draw or retry refused.
//
// Redis runs a script on its one thread, so what a step costs is what the
// fleet's calls per second on one breaker are bounded by: a breaker's hash
// is read once per batch however many of its steps the batch holds, a
// step's changes are written once, at the batch's end, and only the fields
// that changed.
//
// A breaker is a hash: s state, g generation, c consecutive failures, o
// opened at (µs on the callers' clock), p probes in flight, k successful
// probes, e/f/u executions, failures, successes, l when the last probe
// granted loses its slot (µs). With a failure rate, the window's 10 buckets
// are in slots 0–9: iN the bucket's index (state.RateBucket), nN its calls,
// xN its failures. A transition empties the window. The rule is
// state.BreakerEntry.Apply's, which statetest holds the Store to, step by
// step over random sequences.
//
// A breaker step's arguments: 1 kind (a acquire, r record, c record
// current, s set), 2 now (µs), 3 delay (µs), 4 half-open probes, 5 TTL
// (ms), 6 probe lease (µs), 7 failure threshold, 8 success threshold, 9 the
// permit's generation, 10 '1' if the permit is a probe, 11 how the call
// counts (0 ignore, 1 fail, 2 success), 12 the state to set, 13 failure
// rate (0: off), 14 minimum calls, 15 the current bucket, 16 how many ends
// alike a record step records (state.BreakerOp.N, at least 1). An acquire,
// the step of every call, reads the first six and is sent only those: each
// argument is a string Redis makes for the script.
//
// A batch of one acquire on a closed breaker (the step of nearly every
// call) is answered before the rest of the script runs: it reads the six
// fields its answer holds, grants, and writes nothing, as the whole script
// would; its reply is the five numbers that are not always the same (g, o,
// e, f, u), where a breaker step's reply has ten. A corrupt one of those six takes the whole script, which heals
// the record; a corrupt one of the other four heals at the next step that
// is not such an acquire, in a new generation: the permits granted before
// then do not count, as no permit of a corrupt record does.
//
// A draw step takes one unit of a count under its limit (1), the count
// expiring after 2 (ms). A count that is not a whole number of at least 0
// (another program's, or corrupt) heals to 0: a negative one would let the
// task retry past its budget.
//
// A ratio step counts a call (2: '0') or asks for a retry ('1') in the
// current window's hash (q calls, r retries), weighing the previous
// window's by 1, the part of it still inside the sliding window; a retry
// is allowed while retries stay within max(4, 3 × calls). 5 is the
// window's expiry (ms), set when its first write makes it; 6 the calls the
// step records first (state.RatioOp.Calls: at least 1 for a call's record,
// those held back with a retry's ask). A refused retry writes nothing but
// those calls.
var script = redis.NewScript(scriptSrc)

// scriptSrc is script's Lua.
const scriptSrc = `
-- whole reports whether n is a whole number of at least 0.
local function whole(n) return n and n >= 0 and n == math.floor(n) end

if ARGV[1] == '1' and ARGV[3] == 'b' and ARGV[6] == 'a' then
  local h = redis.call('HMGET', KEYS[1], 's', 'g', 'o', 'e', 'f', 'u')
  local g, o, e, f, u = tonumber(h[2]), tonumber(h[3]), tonumber(h[4]), tonumber(h[5]), tonumber(h[6])
  if h[1] == '0' and o and whole(g) and whole(e) and whole(f) and whole(u) then return {{g, o, e, f, u}} end
end

local fields = {'s', 'g', 'c', 'o', 'p', 'k', 'e', 'f', 'u', 'l'}
local channel = ARGV[2]
local cache, order = {}, {} -- the breakers read this batch, by key, in the order first read

-- load reads a breaker's hash once per batch. A field another program
-- wrote, or a corrupt one (not a number; not a whole number in its range,
-- but for o and l), heals: the record starts again closed, in a
-- generation of its own, so that no permit of what was there counts.
local function load(key)
  local r = cache[key]
  if r then return r end
  local h = redis.call('HMGET', key, 's', 'g', 'c', 'o', 'p', 'k', 'e', 'f', 'u', 'l')
  local v, sane, new = {}, true, true
  for j = 1, 10 do
    local x, n = h[j], 0
    if x then
      new = false
      n = tonumber(x)
      if n == nil then
        n, sane = 0, false
      elseif j ~= 4 and j ~= 10 and (n < 0 or n ~= math.floor(n) or (j == 1 and n > 2)) then
        n, sane = 0, false
      end
    end
    v[j] = n
  end
  -- A record written for the first time, or healed, is written whole.
  r = {v = v, old = {unpack(v)}, all = new, dirty = false, ttl = 1}
  if not sane then
    redis.call('DEL', key)
    v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10] = 0, v[2] + 1, 0, 0, 0, 0, 0, 0, 0, 0
    r.all, r.dirty = true, true
  end
  cache[key] = r
  order[#order + 1] = key
  return r
end

-- flush writes what the batch changed of each breaker: the fields that
-- differ from what it read (all of them after a heal), and the expiry. A
-- batch whose steps changed nothing (a refusal, a closed breaker's grant, a
-- stale end) writes nothing, its expiry included.
local function flush()
  for _, key in ipairs(order) do
    local r = cache[key]
    if r.dirty then
      local v, old, args = r.v, r.old, {}
      for j = 1, 10 do
        if r.all or v[j] ~= old[j] then
          args[#args + 1] = fields[j]
          args[#args + 1] = v[j]
        end
      end
      if #args > 0 then redis.call('HSET', key, unpack(args)) end
      redis.call('PEXPIRE', key, r.ttl)
    end
  end
end

local windowFields
-- window is the fields of a failure-rate window, made once per batch.
local function window()
  if not windowFields then
    windowFields = {}
    for j = 0, 9 do
      windowFields[#windowFields + 1] = 'i' .. j
      windowFields[#windowFields + 1] = 'n' .. j
      windowFields[#windowFields + 1] = 'x' .. j
    end
  end
  return windowFields
end

-- windowAdd counts a call (fail: 1 for a failure) in the current bucket
-- and returns the calls and failures of the window that ends with it.
local function windowAdd(key, bucket, fail)
  local w = redis.call('HMGET', key, unpack(window()))
  local sl = bucket % 10
  local n, x = tonumber(w[3 * sl + 2]) or 0, tonumber(w[3 * sl + 3]) or 0
  if tonumber(w[3 * sl + 1]) ~= bucket then n, x = 0, 0 end
  n, x = n + 1, x + fail
  w[3 * sl + 1], w[3 * sl + 2], w[3 * sl + 3] = bucket, n, x
  redis.call('HSET', key, 'i' .. sl, bucket, 'n' .. sl, n, 'x' .. sl, x)
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

local function breakerStep(key, a)
  local r = load(key)
  local v = r.v
  local s, g, c, o, p, k, e, f, u, l = v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]
  local kind, now = ARGV[a + 1], tonumber(ARGV[a + 2])
  local changed, from, granted, isProbe, windowed = 0, s, 0, 0, false
  local function transition(t)
    if s == t then return end
    changed, from = 1, s
    s, g = t, g + 1
    c, p, k, e, f, u = 0, 0, 0, 0, 0, 0
    if t == 1 then o = now end
  end
  if kind == 'a' then
    if s == 1 and now >= o + tonumber(ARGV[a + 3]) then transition(2) end
    local maxProbes, lease = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 6])
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
    for _ = 1, tonumber(ARGV[a + 16]) do
      local gen, probe = tonumber(ARGV[a + 9]), ARGV[a + 10] == '1'
      if kind == 'c' then gen, probe = g, (s == 2 and p > 0) end
      if gen ~= g then break end -- granted in a state the breaker has left
      local count, rate = tonumber(ARGV[a + 11]), tonumber(ARGV[a + 13])
      if probe and p > 0 then p = p - 1 end
      if count == 1 then
        e, f = e + 1, f + 1
        if s == 0 and rate > 0 then
          windowed = true
          local calls, failures = windowAdd(key, tonumber(ARGV[a + 15]), 1)
          if calls > 0 and calls >= tonumber(ARGV[a + 14]) and failures >= rate * calls then transition(1) end
        elseif s == 0 then
          c = c + 1
          if c >= tonumber(ARGV[a + 7]) then transition(1) end
        elseif s == 2 then
          transition(1)
        end
      elseif count == 2 then
        e, u = e + 1, u + 1
        if s == 0 then
          c = 0
          if rate > 0 then
            windowed = true
            windowAdd(key, tonumber(ARGV[a + 15]), 0)
          end
        elseif s == 2 then
          k = k + 1
          if k >= tonumber(ARGV[a + 8]) then transition(0) end
        end
      end
    end
  elseif kind == 's' then
    transition(tonumber(ARGV[a + 12]))
  end
  if windowed or s ~= v[1] or g ~= v[2] or c ~= v[3] or o ~= v[4] or p ~= v[5] or k ~= v[6] or e ~= v[7] or f ~= v[8] or u ~= v[9] or l ~= v[10] then
    v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10] = s, g, c, o, p, k, e, f, u, l
    r.dirty = true
  end
  if r.dirty then r.ttl = ARGV[a + 5] end
  if changed == 1 then
    redis.call('HDEL', key, unpack(window()))
    -- The transition is published for the workers that refuse calls
    -- themselves while they saw the breaker open.
    if channel ~= '' then redis.call('PUBLISH', channel, key .. ' ' .. g) end
  end
  return {s, g, o, granted, isProbe, changed, from, e, f, u}
end

local function drawStep(key, a)
  local used = tonumber(redis.call('GET', key) or '0')
  if used == nil or used < 0 or used ~= math.floor(used) then
    used = 0
    redis.call('SET', key, 0)
  end
  if used >= tonumber(ARGV[a + 1]) then return {0, used} end
  used = redis.call('INCR', key)
  redis.call('PEXPIRE', key, ARGV[a + 2])
  return {1, used}
end

local function ratioStep(key, prevKey, a)
  local cur = redis.call('HMGET', key, 'q', 'r')
  local prev = redis.call('HMGET', prevKey, 'q', 'r')
  local weight, n = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 6])
  local calls = (tonumber(cur[1]) or 0) + (tonumber(prev[1]) or 0) * weight
  local retries = (tonumber(cur[2]) or 0) + (tonumber(prev[2]) or 0) * weight
  local ok, wrote = 1, false
  if n > 0 then
    redis.call('HINCRBY', key, 'q', n)
    calls, wrote = calls + n, true
  end
  if ARGV[a + 2] == '1' then
    if retries + 1 > math.max(tonumber(ARGV[a + 4]), tonumber(ARGV[a + 3]) * calls) then
      ok = 0 -- a refused retry writes nothing but the calls it carries
    else
      redis.call('HINCRBY', key, 'r', 1)
      retries, wrote = retries + 1, true
    end
  end
  if wrote and not cur[1] and not cur[2] then
    -- A window's hash is made by its first write: its expiry, from then,
    -- outlasts the window and the next, in which it is the previous one.
    redis.call('PEXPIRE', key, ARGV[a + 5])
  end
  return {ok, tostring(calls), tostring(retries)}
end

local out, ai, ki, stopped = {}, 3, 1, false
for i = 1, tonumber(ARGV[1]) do
  local kind, gate, nargs = ARGV[ai], ARGV[ai + 1] == '1', tonumber(ARGV[ai + 2])
  local a = ai + 2 -- the step's argument n is ARGV[a + n]
  ai = ai + 3 + nargs
  local key = KEYS[ki]
  ki = ki + 1
  local prevKey
  if kind == 'q' then
    prevKey = KEYS[ki]
    ki = ki + 1
  end
  if stopped then
    out[i] = {}
  else
    local r
    -- A breaker's key is never a draw's or a ratio's (their names differ
    -- by prefix), so the breakers' writes held back to the batch's end
    -- are read by no other kind of step.
    if kind == 'b' then
      r = breakerStep(key, a)
    elseif kind == 'd' then
      r = drawStep(key, a)
    else
      r = ratioStep(key, prevKey, a)
    end
    out[i] = r
    if gate then
      if kind ~= 'b' then
        stopped = r[1] == 0
      elseif ARGV[a + 1] == 'a' then
        stopped = r[4] == 0
      else
        stopped = r[1] == 1 and tonumber(ARGV[a + 2]) < r[3] + tonumber(ARGV[a + 3])
      end
    end
  end
end
flush()
return out
`
