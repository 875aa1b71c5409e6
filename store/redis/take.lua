-- sluice: take from every bucket of one client, all or nothing.
--
-- The algorithms are the Go functions of package algorithm, transcribed:
-- same decisions, same floating-point operations in the same order. Any
-- change here must be made there too; the conformance tables and the
-- differential test hold them together.
--
-- KEYS[i]  rl:{<client>}:<rule-id>, all with the same {hash tag}
-- ARGV[1]  now in µs, or "" to read the server clock (TIME)
-- ARGV[2 + 6(i-1) ...] per key: kind (1 token_bucket, 2 leaky_bucket,
--          3 fixed_window, 4 sliding_window, 5 sliding_log), limit,
--          window (µs), burst, cost, shadow (0|1)
-- returns  {now, then per key: allowed (0|1), reason (0 none, 1 limited,
--          2 cost exceeds capacity), remaining, reset_after µs, retry_after µs}
--
-- State: buckets 1-4 are one string, packed with struct: kind byte then
-- doubles (times are whole µs, exact in a double); sliding_log is a sorted
-- set of call times. Every write sets an expiry a second past the moment
-- the bucket is indistinguishable from a new one.

local call, pack, unpack = redis.call, struct.pack, struct.unpack
local floor, ceil = math.floor, math.ceil

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
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

local function ceil_duration(units, limit, window)
  if units <= 0 then return 0 end
  return ceil(units * window / limit)
end

-- token bucket ------------------------------------------------------------

local function tb_tokens(cap, limit, window, T, A, at)
  if T == 0 then return cap end
  local tokens = A
  if at > T then tokens = tokens + (at - T) * limit / window end
  if tokens > cap then tokens = cap end
  return tokens
end

local function token_bucket(limit, window, burst, cost, T, A)
  local cap = capacity(1, limit, burst)
  local tokens = tb_tokens(cap, limit, window, T, A, now)
  local bT, bA, changed = T, A, false
  if T == 0 or now < T then
    bT, bA, changed = now, tokens, T ~= 0
  end
  if cost > cap then
    return 0, 2, floor(tokens), ceil_duration(cap - tokens, limit, window), 0, changed, bT, bA
  end
  if tokens >= cost then
    local left = tokens - cost
    return 1, 0, floor(left), ceil_duration(cap - left, limit, window), 0, true, now, left
  end
  local t = bT + ceil_duration(cost - bA, limit, window)
  while tb_tokens(cap, limit, window, bT, bA, t) < cost do t = t + 1 end
  while t > now + 1 and tb_tokens(cap, limit, window, bT, bA, t - 1) >= cost do t = t - 1 end
  if t <= now then t = now + 1 end
  return 0, 1, floor(tokens), ceil_duration(cap - tokens, limit, window), t - now, changed, bT, bA
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

-- evaluate every key ------------------------------------------------------

local n = #KEYS
local out = {now}
local plan = {}       -- per key: what to write if the call is allowed / denied
local vetoed = false

for i = 1, n do
  local key = KEYS[i]
  local a = 2 + (i - 1) * 6
  local kind, limit, window = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local burst, cost, shadow = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), ARGV[a + 5] == '1'
  local allowed, reason, remaining, reset, retry, changed
  local p = {kind = kind, key = key}

  if kind == 5 then
    local t = call('TYPE', key)['ok']
    if t ~= 'zset' and t ~= 'none' then call('DEL', key) end
    -- Drop calls that left the window; move calls from the future to now.
    local pruned = call('ZREMRANGEBYSCORE', key, '-inf', now - window)
    changed = pruned > 0
    local future = call('ZRANGEBYSCORE', key, string.format('(%d', now), '+inf')
    for j = 1, #future do call('ZADD', key, 'XX', now, future[j]) end
    if #future > 0 then changed = true end
    local count = call('ZCARD', key)
    local newest = 0
    if count > 0 then newest = tonumber(call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) end
    remaining = limit - count
    if remaining < 0 then remaining = 0 end
    reset = 0
    if count > 0 then reset = newest + window - now end
    retry = 0
    if cost > limit then
      allowed, reason = 0, 2
    elseif count + cost <= limit then
      allowed, reason, remaining, reset = 1, 0, limit - count - cost, window
      p.add, p.count = cost, count
    else
      allowed, reason = 0, 1
      local k = count + cost - limit
      retry = tonumber(call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')[2]) + window - now
    end
    p.window = window
  else
    local v = redis.pcall('GET', key)
    local f = {0, 0, 0}
    if type(v) == 'string' and string.byte(v, 1) == kind then
      if kind == 2 then
        f[1] = unpack('<d', v, 2)
      elseif kind == 4 then
        f[1], f[2], f[3] = unpack('<ddd', v, 2)
      else
        f[1], f[2] = unpack('<dd', v, 2)
      end
    elseif type(v) == 'table' then
      call('DEL', key) -- a sorted set left by an earlier sliding_log rule
    end
    local s1, s2, s3
    if kind == 1 then
      allowed, reason, remaining, reset, retry, changed, s1, s2 = token_bucket(limit, window, burst, cost, f[1], f[2])
    elseif kind == 2 then
      allowed, reason, remaining, reset, retry, changed, s1 = leaky_bucket(limit, window, burst, cost, f[1])
    elseif kind == 3 then
      allowed, reason, remaining, reset, retry, changed, s1, s2 = fixed_window(limit, window, cost, f[1], f[2])
    else
      allowed, reason, remaining, reset, retry, changed, s1, s2, s3 = sliding_window(limit, window, cost, f[1], f[2], f[3])
    end
    -- Expiry: when the written state equals a new bucket, plus a second.
    local idle
    if kind == 1 then
      idle = s1 + ceil_duration(capacity(1, limit, burst) - s2, limit, window) - now
    elseif kind == 2 then
      idle = s1 - now
    elseif kind == 3 then
      idle = s1 + window - now
    else
      idle = s1 + 2 * window - now
    end
    if idle < 0 then idle = 0 end
    p.ttl = ceil(idle / 1000) + 1000
    if kind == 2 then p.val = pack('<Bd', kind, s1)
    elseif kind == 4 then p.val = pack('<Bddd', kind, s1, s2, s3)
    else p.val = pack('<Bdd', kind, s1, s2) end
  end

  p.allowed, p.changed = allowed == 1, changed
  plan[i] = p
  if allowed == 0 and not shadow then vetoed = true end
  out[#out + 1] = allowed
  out[#out + 1] = reason
  out[#out + 1] = remaining
  out[#out + 1] = reset
  out[#out + 1] = retry
end

-- write: every allowing bucket when the call passes; otherwise only a denied
-- bucket whose state was rebased (a clock that went backwards).
for i = 1, n do
  local p = plan[i]
  local write = (p.allowed and not vetoed) or (not p.allowed and p.changed)
  if write then
    if p.kind == 5 then
      if p.add then
        for j = 1, p.add do
          local m = p.count + j
          while call('ZADD', p.key, 'NX', now, string.format('%d.%d', now, m)) == 0 do m = m + p.add end
        end
      end
      call('PEXPIRE', p.key, ceil(p.window / 1000) + 1000)
    else
      call('SET', p.key, p.val, 'PX', p.ttl)
    end
  end
end
return out
