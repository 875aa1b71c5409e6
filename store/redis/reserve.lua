-- sluice: reserve a slot for one call, in buckets that may make it wait.
--
-- redis.go puts codec.lua and take.lua in front of this file: the
-- algorithms below are take.lua's, evaluated at the instants this file
-- chooses by setting take.lua's now. Loaded with take.lua as one function
-- library (FCALL), these definitions are made once, not on every run; as a
-- script (EVALSHA) redis.go ends it by running reserve(KEYS, ARGV). Any
-- change to what follows must be made in algorithm/reserve.go
-- (FirstAllowed) and store/memory/reserve.go too; the differential test
-- holds them together.
--
-- One call: every key is one of its buckets (token_bucket or leaky_bucket),
-- all in one slot. The wait T is the least after which every non-shadow
-- bucket admits the call (each bucket's first admitting instant, past any
-- reservations it holds). If T <= the max wait, every bucket is taken from
-- as take.lua would at now + T, and its expiry counts from now; otherwise
-- nothing is written.
--
-- reserve(keys, args) runs one call: KEYS and ARGV as follows.
--
-- KEYS[i]  rl:{<client>}:<rule-id>
-- ARGV[1]  now as take.lua's ARGV[1], or "" to read the server clock
-- ARGV[2]  per key, take.lua's 34 bytes (flags: 1 shadow)
-- ARGV[3]  the max wait, µs
-- returns  now ('<d', as take.lua), the wait in µs ('<d'; 0 when denied),
--          then per key take.lua's 26 bytes: when granted the result at
--          now + T with reset_after counted from now; when denied the
--          result now, allowed when that bucket's own wait fits, else
--          retry_after = the time until it would

-- The adapters between this file and take.lua's algorithms and codec.

-- the stored state of key i, as the arguments its algorithm takes
local function st_read(kind, v)
  local f1, f2, f3 = decode(v, kind)
  if not f1 then f1, f2, f3 = NEW, 0, 0 end
  return {f1, f2, f3}
end

-- the instant the state is new again (algorithm.Idle's until)
local function st_until(kind, s)
  if kind == 1 and s[2] > 0 then return s[1] + 1 end
  return s[1]
end

-- the algorithm at now = at: allowed, reason, remaining, reset, retry,
-- changed, and the state it would write
local function st_eval(p, s, at)
  now = at
  if p.kind == 1 then
    return token_bucket(p.limit, p.window, p.burst, p.cost, s[1], s[2], s[3])
  end
  return leaky_bucket(p.limit, p.window, p.burst, p.cost, s[1])
end

local function st_encode(p, s1, s2)
  if p.kind == 1 then return encode(1, s1, s2, p.limit) end
  return encode(2, s1)
end

-- algorithm.FirstAllowed: the first instant >= now0 at which the bucket
-- admits the call; nil when it never can (cost above capacity), false when
-- the search did not converge.
local function first_allowed(p, s, now0)
  local cap = capacity(p.kind, p.limit, p.burst)
  if p.cost > cap then return nil end
  local t = now0
  local idle = st_until(p.kind, s) - now0
  if idle > 0 then
    local e
    if p.kind == 1 then
      e = cap * p.window / p.limit
    else
      e = cap * floor((p.window + p.limit - 1) / p.limit)
    end
    if e >= 4611686018427387904 then e = 4611686018427387904 end
    local c = now0 + idle - floor(e)
    if c > t then t = c end
  end
  for _ = 1, 64 do
    local r = {st_eval(p, s, t)}
    local reason, retry = r[2], r[5]
    if r[1] == 1 then
      for _ = 1, 16 do
        if t <= now0 then break end
        local r2 = {st_eval(p, s, t - 1)}
        if r2[1] ~= 1 then break end
        t, r = t - 1, r2
      end
      return t, r
    end
    if reason == 2 then return nil end
    if retry < 1 then retry = 1 end
    t = t + retry
  end
  return false
end

-- reserve decides one call.
local function reserve(keys, args)
  set_now(args[1])
  local params, maxwait = args[2], tonumber(args[3])
  local now0 = now
  local cur = call('MGET', unpk(keys))
  local n = #keys
  local P, S, at, R = {}, {}, {}, {}
  local wait, never = 0, false
  for i = 1, n do
    local kind, flags, limit, window, burst, cost = sunpack('<BBdddd', params, 34 * i - 33)
    if kind ~= 1 and kind ~= 2 then
      return redis.error_reply('sluice reserve: only token_bucket and leaky_bucket rules can reserve')
    end
    local p = {kind = kind, shadow = flags % 2 == 1, limit = limit, window = window, burst = burst, cost = cost}
    P[i], S[i] = p, st_read(kind, cur[i])
    local t, r = first_allowed(p, S[i], now0)
    R[i] = r
    if t == false then
      return redis.error_reply('sluice reserve: the first admitting instant was not found')
    end
    at[i] = t
    if not p.shadow then
      if t == nil then never = true elseif t - now0 > wait then wait = t - now0 end
    end
  end

  local out = {pack('<d', now0), ''}
  if never or wait > maxwait then
    for i = 1, n do
      local a, reason, remaining, reset, retry = st_eval(P[i], S[i], now0)
      if reason ~= 2 then
        local t = at[i]
        if t - now0 <= maxwait then
          a, reason, retry = 1, 0, 0
        else
          a, reason, retry = 0, 1, t - now0 - maxwait
        end
      end
      out[i + 2] = pack('<BBddd', a, reason, remaining, reset, retry)
    end
    out[2] = pack('<d', 0)
    return concat(out)
  end

  for i = 1, n do
    local p = P[i]
    local a, reason, remaining, reset, retry, _, s1, s2
    if at[i] == now0 + wait then
      -- first_allowed evaluated the bucket at this instant already.
      a, reason, remaining, reset, retry, _, s1, s2 = unpk(R[i], 1, 8)
    else
      a, reason, remaining, reset, retry, _, s1, s2 = st_eval(p, S[i], now0 + wait)
    end
    if a == 1 then
      call('SET', keys[i], st_encode(p, s1, s2), 'PX', fmt('%d', ceil((reset + wait) / 1000) + 1000))
    end
    out[i + 2] = pack('<BBddd', a, reason, remaining, reset + wait, retry)
  end
  out[2] = pack('<d', wait)
  return concat(out)
end
