-- sluice: take from buckets, all or nothing per call, for one or more calls.
--
-- The algorithms are the Go functions of package algorithm, transcribed:
-- same decisions, same floating-point operations in the same order. Any
-- change here must be made there too; the conformance tables and the
-- differential test hold them together.
--
-- A run decides one or more calls (a batch, on a standalone server) in
-- order; each call is one or more consecutive keys. Within a call it is all
-- or nothing: when a non-shadow key denies, no key of that call is taken
-- from. A later call sees what an earlier one took.
--
-- KEYS[i]  rl:{<client>}:<rule-id>
-- ARGV[1]  now in µs, or "" to read the server clock (TIME)
-- ARGV[2]  per key, 34 bytes packed little-endian ('<BBdddd'): kind (1
--          token_bucket, 2 leaky_bucket, 3 fixed_window, 4 sliding_window,
--          5 sliding_log), flags (1 shadow, 2 the key starts a new call; the
--          first key always does), limit, window (µs), burst, cost
-- returns  a string: now (µs, '<d'), then per key 26 bytes ('<BBddd'):
--          allowed (0|1), reason (0 none, 1 limited, 2 cost exceeds
--          capacity), remaining, reset_after µs, retry_after µs
--
-- Packed arguments and reply keep the per-key cost low: one unpack instead
-- of six tonumber calls, one reply string instead of five integers.
--
-- State of buckets 1-4 is one string; sliding_log is a sorted set of call
-- times. A state that fits is stored as a decimal integer of at most 19
-- digits, which Redis keeps in the object itself (an "int" string: 16 bytes
-- instead of an embedded string of 32-64; see docs/redis.md):
-- token_bucket as 1<F µs - EPOCH, 15 digits><F ns part, 3 digits>, F the
-- instant it is full again in ns (unless F is after 2051); fixed_window as
-- 3<count, 3 digits><T - EPOCH, 15 digits> when the count is below 1000;
-- leaky_bucket as 2<TAT>. Otherwise, and sliding_window always, it is packed
-- with struct: the kind byte, then doubles (times are whole µs, exact in a
-- double). The first byte tells an algorithm's state from another's, left
-- by an edited rule: 1-5 packed, '1'-'5' decimal. Every write sets an
-- expiry a second past the moment the bucket is indistinguishable from a
-- new one.
--
-- A token bucket's F (ns since the epoch, ~1.7e18) does not fit a double;
-- it is kept as two exact parts, Fus = F div 1000 and Fns = F mod 1000
-- (Fus = 0: a new bucket), as the Go code computes them from its int64.

-- The state codec (decode, encode, tb_parts, EPOCH) is codec.lua, which
-- redis.go puts in front of this file.

local call, pcall_ = redis.call, redis.pcall
local ceil = math.ceil

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
end

local function capacity(kind, limit, burst)
  if kind == 1 then
    if burst > 0 then return burst end
    return limit
  elseif kind == 2 then
    if burst > 0 then return burst + 1 end
    return 2
  end
  return limit
end

-- token bucket ------------------------------------------------------------

-- The state is F, the instant the bucket is full again; a call works on the
-- debt F - now in ns, at most tol (an empty bucket). See token_bucket.go.
local TB_MAX_DEBT = 4611686018427387904 -- 2^62 ns, the largest tol

-- the debt in ns that n tokens are
local function tb_cost(n, limit, window)
  return n * window * 1000 / limit
end

-- the debt at `at` of the state (Fus, Fns); true when above tol (clamped)
local function tb_debt(Fus, Fns, at, tol)
  if Fus == 0 then return 0, false end
  local d = (Fus - at) * 1000 + Fns
  if d < 0 then return 0, false end
  if d > tol then return floor(tol), true end
  return d, false
end

-- the state (Fus, Fns) whose debt at now is d, a whole number of ns
local function tb_state(d)
  return tb_parts(now, d)
end

-- the largest cost r <= cap one call could take at debt d
local function tb_remaining(d, tol, cap, limit, window)
  local r = floor((tol - d) / tb_cost(1, limit, window))
  if r < 0 then r = 0 end
  if r > cap then r = cap end
  while r > 0 and d + tb_cost(r, limit, window) > tol do r = r - 1 end
  while r < cap and d + tb_cost(r + 1, limit, window) <= tol do r = r + 1 end
  return r
end

local function token_bucket(limit, window, burst, cost, Fus, Fns)
  local cap = capacity(1, limit, burst)
  local tol = tb_cost(cap, limit, window)
  if tol > TB_MAX_DEBT then tol = TB_MAX_DEBT end
  local d, clamped = tb_debt(Fus, Fns, now, tol)
  local bus, bns = Fus, Fns
  if clamped then bus, bns = tb_state(d) end
  local inc = tb_cost(cost, limit, window)
  if cost > cap or inc > tol then
    return 0, 2, tb_remaining(d, tol, cap, limit, window), ceil(d / 1000), 0, clamped, bus, bns
  end
  if d + inc <= tol then
    local nxt = floor(d + inc)
    local nus, nns = tb_state(nxt)
    return 1, 0, tb_remaining(nxt, tol, cap, limit, window), ceil(nxt / 1000), 0, true, nus, nns
  end
  local t = now + ceil((d + inc - tol) / 1000)
  if t <= now then t = now + 1 end
  while tb_debt(bus, bns, t, tol) + inc > tol do t = t + 1 end
  while t > now + 1 and tb_debt(bus, bns, t - 1, tol) + inc <= tol do t = t - 1 end
  return 0, 1, tb_remaining(d, tol, cap, limit, window), ceil(d / 1000), t - now, clamped, bus, bns
end

-- leaky bucket (GCRA) -----------------------------------------------------

local function leaky_bucket(limit, window, burst, cost, tat0)
  local cap = capacity(2, limit, burst)
  local interval = floor((window + limit - 1) / limit)
  local max_debt = cap * interval
  local tat, clamped = tat0, false
  if tat < now then tat = now end
  if tat - now > max_debt then tat, clamped = now + max_debt, true end
  local base = tat0
  if clamped then base = tat end
  local function remaining(t)
    local r = floor((max_debt - (t - now)) / interval)
    if r > 0 then return r end
    return 0
  end
  if cost > cap then
    return 0, 2, remaining(tat), tat - now, 0, clamped, base
  end
  local nxt = tat + cost * interval
  if nxt - now <= max_debt then
    return 1, 0, remaining(nxt), nxt - now, 0, true, nxt
  end
  return 0, 1, remaining(tat), tat - now, nxt - max_debt - now, clamped, base
end

-- fixed window ------------------------------------------------------------

local function fixed_window(limit, window, cost, T, A)
  local start = now - now % window
  local count, rebased = 0, false
  if T == start then count = A
  elseif T > start then count, rebased = A, true end
  local bT, bA = T, A
  if rebased then bT, bA = start, count end
  local function remaining(c)
    if c >= limit then return 0 end
    return limit - c
  end
  local finish = start + window
  local reset = finish - now
  if count == 0 then reset = 0 end
  if cost > limit then
    return 0, 2, remaining(count), reset, 0, rebased, bT, bA
  end
  if count + cost <= limit then
    count = count + cost
    return 1, 0, remaining(count), finish - now, 0, true, start, count
  end
  return 0, 1, remaining(count), reset, finish - now, rebased, bT, bA
end

-- sliding window ----------------------------------------------------------

local function sw_counts(window, T, A, B, at)
  local start = at - at % window
  if T == start then return start, A, B, false end
  if T == start - window then return start, 0, A, false end
  if T > start then return start, A, B, true end
  return start, 0, 0, false
end

local function sw_estimate(window, start, at, cur, prev)
  return prev * (window - (at - start)) / window + cur
end

local function sliding_window(limit, window, cost, T, A, B)
  local start, cur, prev, rebased = sw_counts(window, T, A, B, now)
  local bT, bA, bB = T, A, B
  if rebased then bT, bA, bB = start, cur, prev end
  local est = sw_estimate(window, start, now, cur, prev)
  local function remaining(e)
    if e >= limit then return 0 end
    return floor(limit - e)
  end
  local function reset_after(c, p)
    if c > 0 then return start + 2 * window - now end
    if p > 0 then return start + window - now end
    return 0
  end
  if cost > limit then
    return 0, 2, remaining(est), reset_after(cur, prev), 0, rebased, bT, bA, bB
  end
  if est + cost <= limit then
    cur = cur + cost
    return 1, 0, remaining(est + cost), reset_after(cur, prev), 0, true, start, cur, prev
  end
  local function passes(at)
    local s, c, p = sw_counts(window, bT, bA, bB, at)
    return sw_estimate(window, s, at, c, p) + cost <= limit
  end
  local w = window
  local t
  if cur + cost <= limit and prev > 0 then
    t = start + ceil(w - (limit - cur - cost) * w / prev)
  elseif cur > 0 and cost <= limit then
    t = start + window + ceil(w - (limit - cost) * w / cur)
  else
    t = start + window
  end
  if t <= now then t = now + 1 end
  while not passes(t) do t = t + 1 end
  while t > now + 1 and passes(t - 1) do t = t - 1 end
  return 0, 1, remaining(est), reset_after(cur, prev), t - now, rebased, bT, bA, bB
end

-- evaluate every call -----------------------------------------------------

local params = ARGV[2]
local n = #KEYS
local out = {pack('<d', now)}
-- Per key of the current call, what to write: w[3i-2] is 2 when the key
-- allowed, 1 when it denied but its state changed (a clamped debt, a clock
-- that went backwards), else 0; w[3i-1] and w[3i] are the value and expiry
-- (ms, as text: Redis turns a number argument into text with a costly
-- '%.17g'), or for a sliding log the window and {cost, count} when it
-- allowed.
local w = {}
local first, vetoed = 1, false
-- Every string state in one read: a key appears once in a run (the store
-- sends a call that repeats a key of the run in the next run).
local cur = call('MGET', unpack(KEYS))

-- write the keys first..last of a finished call.
local function flush(last)
  local pass = vetoed and 1 or 2
  for i = first, last do
    local state = w[3 * i - 2]
    if state == pass or state == 1 then
      local key, val = KEYS[i], w[3 * i - 1]
      if type(val) == 'number' then -- a sliding log
        local add = w[3 * i]
        if state == 2 then
          local cost, c = add[1], add[2]
          local at = fmt('%d', now)
          for j = 1, cost do
            local m = c + j
            while call('ZADD', key, 'NX', at, fmt('%d.%d', now, m)) == 0 do m = m + cost end
          end
        end
        call('PEXPIRE', key, fmt('%d', ceil(val / 1000) + 1000))
      else
        call('SET', key, val, 'PX', w[3 * i])
      end
    end
  end
end

for i = 1, n do
  local kind, flags, limit, window, burst, cost = sunpack('<BBdddd', params, 34 * i - 33)
  if flags >= 2 then -- a new call starts: write the previous one
    if i > 1 then
      flush(i - 1)
      first, vetoed = i, false
    end
    flags = flags - 2
  end
  local key = KEYS[i]
  local allowed, reason, remaining, reset, retry, changed, wv, wt

  if kind == 5 then
    -- A key of another type (an edited rule) is replaced.
    local pruned = pcall_('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now - window))
    if type(pruned) == 'table' then
      call('DEL', key)
      pruned = 0
    end
    changed = pruned > 0
    local count = call('ZCARD', key)
    local newest = 0
    if count > 0 then
      newest = tonumber(call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
      if newest > now then
        -- The clock went backwards: calls from the future move to now.
        local future = call('ZRANGEBYSCORE', key, fmt('(%d', now), '+inf')
        local at = fmt('%d', now)
        for j = 1, #future do call('ZADD', key, 'XX', at, future[j]) end
        newest, changed = now, true
      end
    end
    remaining = limit - count
    if remaining < 0 then remaining = 0 end
    reset = 0
    if count > 0 then reset = newest + window - now end
    retry = 0
    if cost > limit then
      allowed, reason = 0, 2
    elseif count + cost <= limit then
      allowed, reason, remaining, reset = 1, 0, limit - count - cost, window
      wt = {cost, count}
    else
      allowed, reason = 0, 1
      local k = count + cost - limit
      retry = tonumber(call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')[2]) + window - now
    end
    wv = window
  else
    -- A key of another type (a sorted set left by a sliding_log rule) reads
    -- as false: a new bucket, and SET replaces it.
    local v = cur[i]
    local f1, f2, f3 = decode(v, kind)
    if not f1 then f1, f2, f3 = 0, 0, 0 end
    local s1, s2, s3
    if kind == 1 then
      allowed, reason, remaining, reset, retry, changed, s1, s2 = token_bucket(limit, window, burst, cost, f1, f2)
    elseif kind == 2 then
      allowed, reason, remaining, reset, retry, changed, s1 = leaky_bucket(limit, window, burst, cost, f1)
    elseif kind == 3 then
      allowed, reason, remaining, reset, retry, changed, s1, s2 = fixed_window(limit, window, cost, f1, f2)
    else
      allowed, reason, remaining, reset, retry, changed, s1, s2, s3 = sliding_window(limit, window, cost, f1, f2, f3)
    end
    -- Expiry: when the written state equals a new bucket, plus a second.
    -- For the buckets, that is the reset_after of the state written.
    local idle
    if kind <= 2 then
      idle = reset
    elseif kind == 3 then
      idle = s1 + window - now
    else
      idle = s1 + 2 * window - now
    end
    if idle < 0 then idle = 0 end
    wv, wt = encode(kind, s1, s2, s3), fmt('%d', ceil(idle / 1000) + 1000)
  end

  -- in index order, so that w stays an array
  if allowed == 1 then
    w[3 * i - 2] = 2
  elseif changed then
    w[3 * i - 2] = 1
  else
    w[3 * i - 2] = 0
  end
  w[3 * i - 1] = wv
  w[3 * i] = wt or false
  if allowed == 0 and flags == 0 then vetoed = true end -- flags: 1 = shadow
  out[i + 1] = pack('<BBddd', allowed, reason, remaining, reset, retry)
end
flush(n)
return table.concat(out)
