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
-- A run decides one or more reservations (a batch, on a standalone
-- server) in order; each is one or more consecutive keys, its buckets
-- (token_bucket or leaky_bucket), all in one slot; no key appears twice in
-- a run. For each reservation, the wait T is the least after which every
-- non-shadow bucket admits the call (each bucket's first admitting
-- instant, past any reservations it holds). If T <= its max wait, every
-- bucket is taken from as take.lua would at now + T, and its expiry counts
-- from now; otherwise nothing of it is written. Each is atomic on its own,
-- and the run as a whole.
--
-- No table is made per key or per evaluation: the per-key values live in
-- tables made once (once per library load under FCALL) and indexed by
-- position, and an evaluation's results stay in locals. The common case,
-- a bucket with room now, costs what take.lua's evaluation does: the
-- search for a later instant starts only when the bucket denies now, and
-- a run of one reservation of one bucket with room (lone) is answered as
-- take.lua answers a lone call, without the tables.
--
-- reserve(keys, args) runs one run: KEYS and ARGV as follows.
--
-- KEYS[i]  rl:{<client>}:<rule-id>
-- ARGV[1]  now as take.lua's ARGV[1], or "" to read the server clock
-- ARGV[2]  per key, take.lua's 34 bytes (flags: 1 shadow, 2 the key starts
--          a new reservation; the first key always does)
-- ARGV[3]  per reservation, its max wait in µs ('<d')
-- returns  now ('<d', as take.lua), then per reservation its wait in µs
--          ('<d'; 0 when denied) and per key of it take.lua's 26 bytes:
--          when granted the result at now + T with reset_after counted
--          from now; when denied the result now, allowed when that
--          bucket's own wait fits, else retry_after = the time until it
--          would

-- the algorithm at now = at: allowed, reason, remaining, reset, retry,
-- changed, and the state it would write (s1, s2)
local function st_eval(kind, limit, window, burst, cost, f1, f2, f3, at)
  now = at
  if kind == 1 then
    return token_bucket(limit, window, burst, cost, f1, f2, f3)
  end
  return leaky_bucket(limit, window, burst, cost, f1)
end

-- the instant algorithm.FirstAllowed's search starts: now0, or where the
-- stored debt is back within an empty bucket's (outstanding reservations:
-- Apply would clamp it before).
local function search_start(kind, limit, window, burst, f1, f2, now0)
  -- the instant the state is new again (algorithm.Idle's until)
  local idle = f1 - now0
  if kind == 1 and f2 > 0 then idle = idle + 1 end
  if idle <= 0 then return now0 end
  local cap, e = capacity(kind, limit, burst)
  if kind == 1 then
    e = cap * window / limit
  else
    e = cap * floor((window + limit - 1) / limit)
  end
  if e >= 4611686018427387904 then e = 4611686018427387904 end
  local c = now0 + idle - floor(e)
  if c > now0 then return c end
  return now0
end

-- algorithm.FirstAllowed from step k of its search, at t: the first
-- instant t >= now0 at which the bucket admits the call, then the
-- evaluation at t (reason, remaining, reset, retry, s1, s2); nil when it
-- never can (cost above capacity), false when the search did not
-- converge. The search starts at search_start's instant; when that is
-- now0, plan takes the first step itself.
local function first_allowed(kind, limit, window, burst, cost, f1, f2, f3, now0, t, k)
  for _ = k, 64 do
    local a, reason, remaining, reset, retry, _, s1, s2 = st_eval(kind, limit, window, burst, cost, f1, f2, f3, t)
    if a == 1 then
      for _ = 1, 16 do
        if t <= now0 then break end
        local a2, reason2, remaining2, reset2, retry2, _, s12, s22 = st_eval(kind, limit, window, burst, cost, f1, f2, f3, t - 1)
        if a2 ~= 1 then break end
        t, reason, remaining, reset, retry, s1, s2 = t - 1, reason2, remaining2, reset2, retry2, s12, s22
      end
      return t, reason, remaining, reset, retry, s1, s2
    end
    if reason == 2 then return nil end
    if retry < 1 then retry = 1 end
    t = t + retry
  end
  return false
end

-- Per key i of the run: its kind and limit P[2i-1], P[2i], its state
-- F[3i-2..3i], its first admitting instant A[i] (nil: never), and the
-- evaluation there E[6i-5..6i] (reason, remaining, reset, retry, s1, s2);
-- per reservation c, its first key B[c], its max wait M[c] and its wait
-- W[c] (-1: denied). Made once.
local P, F, A, E, B, M, W, out = {}, {}, {}, {}, {}, {}, {}, {}

-- plan finds the wait of the reservation of keys first..last, all read in
-- cur: the wait, or -1 when it does not fit maxwait; nil and a message on
-- an error.
local function plan(params, cur, first, last, maxwait, now0)
  local wait, never = 0, false
  for i = first, last do
    local kind, flags, limit, window, burst, cost = sunpack('<BBdddd', params, 34 * i - 33)
    if kind ~= 1 and kind ~= 2 then
      return nil, 'sluice reserve: only token_bucket and leaky_bucket rules can reserve'
    end
    local f1, f2, f3 = decode(cur[i], kind)
    if not f1 then f1, f2, f3 = NEW, 0, 0 end
    P[2 * i - 1], P[2 * i] = kind, limit
    F[3 * i - 2], F[3 * i - 1], F[3 * i] = f1, f2, f3
    -- the search (first_allowed), its first step at now0 taken here
    local t, a, reason, remaining, reset, retry, changed, s1, s2 = now0
    if f1 + 1 > now0 then t = search_start(kind, limit, window, burst, f1, f2, now0) end
    if t ~= now0 then
      t, reason, remaining, reset, retry, s1, s2 = first_allowed(kind, limit, window, burst, cost, f1, f2, f3, now0, t, 1)
    else
      a, reason, remaining, reset, retry, changed, s1, s2 = st_eval(kind, limit, window, burst, cost, f1, f2, f3, now0)
      if a ~= 1 then
        if reason == 2 then
          t = nil
        else
          if retry < 1 then retry = 1 end
          t, reason, remaining, reset, retry, s1, s2 = first_allowed(kind, limit, window, burst, cost, f1, f2, f3, now0, now0 + retry, 2)
        end
      end
    end
    if t == false then
      return nil, 'sluice reserve: the first admitting instant was not found'
    end
    A[i] = t
    if t then
      local e = 6 * i
      E[e - 5], E[e - 4], E[e - 3], E[e - 2], E[e - 1], E[e] = reason, remaining, reset, retry, s1, s2
    end
    if flags % 2 == 0 then -- not shadow
      if t == nil then never = true elseif t - now0 > wait then wait = t - now0 end
    end
  end
  if never or wait > maxwait then return -1 end
  return wait
end

-- answer writes the reservation of keys first..last, planned with wait,
-- and puts its answer in out from index o; returns the next index.
local function answer(keys, params, first, last, wait, maxwait, now0, o)
  if wait < 0 then
    out[o] = pack('<d', 0)
    for i = first, last do
      local kind, _, limit, window, burst, cost = sunpack('<BBdddd', params, 34 * i - 33)
      local a, reason, remaining, reset, retry = st_eval(kind, limit, window, burst, cost, F[3 * i - 2], F[3 * i - 1], F[3 * i], now0)
      if reason ~= 2 then
        local t = A[i]
        if t - now0 <= maxwait then
          a, reason, retry = 1, 0, 0
        else
          a, reason, retry = 0, 1, t - now0 - maxwait
        end
      end
      out[o + i - first + 1] = pack('<BBddd', a, reason, remaining, reset, retry)
    end
    return o + last - first + 2
  end

  local at = now0 + wait
  out[o] = pack('<d', wait)
  for i = first, last do
    local kind, limit = P[2 * i - 1], P[2 * i]
    local a, reason, remaining, reset, retry, s1, s2
    if A[i] == at then
      -- first_allowed evaluated the bucket at this instant already.
      local e = 6 * i
      a, reason, remaining, reset, retry, s1, s2 = 1, E[e - 5], E[e - 4], E[e - 3], E[e - 2], E[e - 1], E[e]
    else
      local _, _, _, window, burst, cost = sunpack('<BBdddd', params, 34 * i - 33)
      a, reason, remaining, reset, retry, _, s1, s2 = st_eval(kind, limit, window, burst, cost, F[3 * i - 2], F[3 * i - 1], F[3 * i], at)
    end
    if a == 1 then
      local v
      if kind == 1 then v = encode(1, s1, s2, limit) else v = encode(2, s1) end
      call('SET', keys[i], v, 'PX', fmt('%d', ceil((reset + wait) / 1000) + 1000))
    end
    out[o + i - first + 1] = pack('<BBddd', a, reason, remaining, reset + wait, retry)
  end
  return o + last - first + 2
end

-- lone decides a run of one reservation of one bucket, the common case,
-- when the bucket admits the call now (wait 0), as take.lua decides a lone
-- call: v is the key's state as read, waits ARGV[3]. It writes what plan
-- and answer would and returns their reply; nil, having written nothing,
-- in every other case (a wait, a denial, an error), which they decide.
local function lone(key, params, v, waits, now0)
  -- a max wait below 0 (sign bit set): even a wait of 0 does not fit
  if byte(waits, 8) >= 128 then return nil end
  local kind, _, limit, window, burst, cost = sunpack('<BBdddd', params, 1)
  if kind ~= 1 and kind ~= 2 then return nil end
  local f1, f2, f3 = decode(v, kind)
  if not f1 then f1, f2, f3 = NEW, 0, 0 end
  -- first_allowed's search would start later than now0
  if f1 + 1 > now0 and search_start(kind, limit, window, burst, f1, f2, now0) > now0 then return nil end
  local a, reason, remaining, reset, retry, changed, s1, s2
  if kind == 1 then
    a, reason, remaining, reset, retry, changed, s1, s2 = token_bucket(limit, window, burst, cost, f1, f2, f3)
    if a ~= 1 then return nil end
    v = encode(1, s1, s2, limit)
  else
    a, reason, remaining, reset, retry, changed, s1 = leaky_bucket(limit, window, burst, cost, f1)
    if a ~= 1 then return nil end
    v = encode(2, s1)
  end
  call('SET', key, v, 'PX', fmt('%d', ceil(reset / 1000) + 1000))
  return pack('<ddBBddd', now0, 0, 1, reason, remaining, reset, retry)
end

-- reserve decides one run: every reservation is planned before any is
-- written, so that a run that fails writes nothing.
local function reserve(keys, args)
  set_now(args[1])
  local params, waits = args[2], args[3]
  local now0 = now
  local n = #keys
  -- Every state in one read: no key appears twice in a run.
  local cur
  if n == 1 then
    cur = call('MGET', keys[1])
    local r = lone(keys[1], params, cur[1], waits, now0)
    if r then return r end
  else
    cur = call('MGET', unpk(keys))
  end
  local c = 0
  for i = 1, n do
    if i == 1 or byte(params, 34 * i - 32) >= 2 then -- a reservation starts
      if c > 0 then
        local w, err = plan(params, cur, B[c], i - 1, M[c], now0)
        if not w then return redis.error_reply(err) end
        W[c] = w
      end
      c = c + 1
      B[c], M[c] = i, sunpack('<d', waits, 8 * c - 7)
    end
  end
  local w, err = plan(params, cur, B[c], n, M[c], now0)
  if not w then return redis.error_reply(err) end
  W[c] = w
  out[1] = pack('<d', now0)
  local o = 2
  for k = 1, c do
    local last = n
    if k < c then last = B[k + 1] - 1 end
    o = answer(keys, params, B[k], last, W[k], M[k], now0, o)
  end
  return concat(out, '', 1, o - 1)
end
