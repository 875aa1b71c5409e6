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
-- ARGV[1]  now in µs relative to EPOCH (codec.lua), or "" to read the
--          server clock (TIME)
-- ARGV[2]  per key, 34 bytes packed little-endian ('<BBdddd'): kind (1
--          token_bucket, 2 leaky_bucket, 3 fixed_window, 4 sliding_window,
--          5 sliding_log), flags (1 shadow, 2 the key starts a new call; the
--          first key always does; 4 a charge, algorithm.Params.Charge),
--          limit, window (µs), burst, cost
-- returns  a string: now (µs relative to EPOCH, '<d'), then per key 26
--          bytes ('<BBddd'): allowed (0|1), reason (0 none, 1 limited, 2
--          cost exceeds capacity), remaining, reset_after µs, retry_after µs
--
-- Packed arguments and reply keep the per-key cost low: one unpack instead
-- of six tonumber calls, one reply string instead of five integers.
--
-- Every value is a whole number below 2^53, so exact in a double, for every
-- rule that passes validation (algorithm.Params.Check) at every instant an
-- int64 of ns can name; products that could pass 2^53 are split (mul_div).
-- No loop runs a number of times that a time, a rule or a state decides,
-- beyond fixed bounds: a script never holds Redis longer than a few reads
-- and writes per key.
--
-- State of buckets 1-4 is one string; sliding_log is a sorted set with one
-- entry per admitted call. A state that fits is stored as a decimal integer
-- of at most 19 digits, which Redis keeps in the object itself (an "int"
-- string: 16 bytes instead of an embedded string of 32-64; see
-- docs/redis.md): token_bucket as 1<F - EPOCH, 15 digits> when F, the
-- instant it is full again, is a whole µs; fixed_window as 3<count, 3
-- digits><T - EPOCH, 15 digits> when the count is below 1000; leaky_bucket
-- as 2<TAT - EPOCH, 15 digits>; all until 2051. Otherwise, and
-- sliding_window always, it is packed with struct: the kind byte + 16, then
-- doubles (times relative to EPOCH; a token bucket's F as µs, remainder in
-- 1/limit µs, and that limit). The first byte tells an algorithm's state
-- from another's, left by an edited rule: 17-20 packed, '1'-'4' decimal
-- (1-4: packed by an earlier version, with absolute times, read as
-- such). Every write sets an expiry a second past the moment the bucket is
-- indistinguishable from a new one.

-- The state codec and the exact arithmetic (decode, encode, mul_div,
-- mul_div_w, wstart, EPOCH, NEW) are codec.lua, which redis.go puts in
-- front of this file.


-- now, in µs relative to EPOCH (see codec.lua): set by set_now at the
-- start of every run, read by the algorithms below. Loaded once as a
-- function library (FCALL), these definitions are made once, not on every
-- run.
local now

-- set_now binds the libraries (codec.lua's bind) and sets now from a run's
-- ARGV[1]: the time given, or "" for the server's clock (TIME).
local function set_now(a1)
  if not call then bind() end
  if a1 ~= '' then
    now = tonumber(a1)
  else
    local t = call('TIME')
    now = (t[1] - EPOCH / 1000000) * 1000000 + t[2]
  end
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

-- the most debt beyond an empty bucket a bucket owes as it is (µs):
-- reservations handed out ahead, which wait at most an hour; debt further
-- beyond (a clock that went backwards) is clamped. algorithm.maxQueue.
local MAX_QUEUE = 3600000000

-- the largest cost a charge counts (algorithm.maxCharge)
local MAX_CHARGE = 1073741823

-- Exact. The state is F, the instant the bucket is full again: whole µs T
-- and a remainder r in 1/limit µs (counted in the limit den). A call works
-- on the debt F - now as the pair (µs, remainder); see token_bucket.go.

-- (q, r) <= (q2, r2), remainders in the same unit
local function le(q, r, q2, r2)
  return q < q2 or (q == q2 and r <= r2)
end

-- the least k with (q, r) <= k·window/limit: the tokens a debt is, rounded
-- up. The float estimate is within 1 of it (the quotient is at most 10^9,
-- the error a few ulps); the exact comparison settles which.
local function tb_owed(q, r, limit, window)
  if q == 0 and r == 0 then return 0 end
  local k = ceil((q * limit + r) / window)
  local kq, kr = mul_div(k, window, limit)
  if not le(q, r, kq, kr) then return k + 1 end
  if k > 0 then
    kq, kr = mul_div(k - 1, window, limit)
    if le(q, r, kq, kr) then return k - 1 end
  end
  return k
end

local function tb_left(q, r, cap, limit, window)
  local k = tb_owed(q, r, limit, window)
  if k >= cap then return 0 end
  return cap - k
end

-- tb_charge takes a charge of cost that does not fit a bucket at debt
-- (q, r) (algorithm.tbCharge): the debt grows by cost tokens, up to
-- MAX_QUEUE beyond an empty bucket's (tq, tr); answered denied, with the
-- wait until a call of cost 1 passes.
local function tb_charge(limit, window, cap, tq, tr, q, r, cost)
  if cost > MAX_CHARGE then cost = MAX_CHARGE end
  local mq = tq + MAX_QUEUE
  local cq, cr = mul_div(cost, window, limit)
  if cq >= mq + 1 then
    q, r = mq, tr -- past the bound whatever the debt (algorithm's overBound)
  else
    q, r = q + cq, r + cr
    if r >= limit then q, r = q + 1, r - limit end
    if not le(q, r, mq, tr) then q, r = mq, tr end
  end
  local reset = q
  if r > 0 then reset = q + 1 end
  local kq, kr = mul_div(1, window, limit)
  local aq, ar = tq - kq, tr - kr
  if ar < 0 then aq, ar = aq - 1, ar + limit end
  local retry = q - aq
  if r > ar then retry = retry + 1 end
  return 0, 1, tb_left(q, r, cap, limit, window), reset, retry, true, now + q, r
end

-- token_bucket for a token of a whole number of µs (window a multiple of
-- limit: 100 a second, 10 a minute) and a state without remainder: every
-- debt is then a whole number of tokens' µs, and the exact arithmetic above
-- comes down to products and one rounded-up quotient. The same decisions
-- and states as the general case below (the differential tests run both),
-- at a third of its cost: this is the common rule.
-- tbw_left is tb_left for tb_whole: cap less the tokens a debt d is,
-- rounded up (the float quotient is checked, as tb_owed's).
local function tbw_left(d, I, cap)
  local k = ceil(d / I)
  if k * I < d then k = k + 1 elseif k > 0 and (k - 1) * I >= d then k = k - 1 end
  if k >= cap then return 0 end
  return cap - k
end

local function tb_whole(I, cap, cost, T, charge, limit, window)
  local q, clamped = 0, false
  if T >= now then q = T - now end
  local tq = cap * I -- an empty bucket's debt
  if q > tq + MAX_QUEUE then q, clamped, T = tq, true, now + tq end
  if cost > cap then
    if charge then return tb_charge(limit, window, cap, tq, 0, q, 0, cost) end
    return 0, 2, tbw_left(q, I, cap), q, 0, clamped, T, 0
  end
  local aq = (cap - cost) * I -- the most debt the call may find
  if q <= aq then
    q = q + cost * I
    return 1, 0, tbw_left(q, I, cap), q, 0, true, now + q, 0
  end
  if charge then return tb_charge(limit, window, cap, tq, 0, q, 0, cost) end
  return 0, 1, tbw_left(q, I, cap), q, T - aq - now, clamped, T, 0
end

local function token_bucket(limit, window, burst, cost, T, r, den, charge)
  local cap = capacity(1, limit, burst)
  if r ~= 0 and den ~= limit then T, r = T + 1, 0 end -- another limit's remainder: up to the µs
  if r == 0 and window % limit == 0 then return tb_whole(window / limit, cap, cost, T, charge, limit, window) end
  local tq, tr = mul_div(cap, window, limit) -- an empty bucket's debt
  local q, dr = 0, 0
  if T >= now then q, dr = T - now, r end
  local clamped = false
  if not le(q, dr, tq + MAX_QUEUE, tr) then
    q, dr, clamped = tq, tr, true
    T, r = now + tq, tr
  end
  local reset = q
  if dr > 0 then reset = q + 1 end
  if cost > cap then
    if charge then return tb_charge(limit, window, cap, tq, tr, q, dr, cost) end
    return 0, 2, tb_left(q, dr, cap, limit, window), reset, 0, clamped, T, r
  end
  local aq, ar = mul_div(cap - cost, window, limit) -- the most debt the call may find
  if le(q, dr, aq, ar) then
    local cq, cr = mul_div(cost, window, limit)
    q, dr = q + cq, dr + cr
    if dr >= limit then q, dr = q + 1, dr - limit end
    reset = q
    if dr > 0 then reset = q + 1 end
    return 1, 0, tb_left(q, dr, cap, limit, window), reset, 0, true, now + q, dr
  end
  if charge then return tb_charge(limit, window, cap, tq, tr, q, dr, cost) end
  -- the first whole µs t with F - t <= (aq, ar)
  local t = T - aq
  if r > ar then t = t + 1 end
  return 0, 1, tb_left(q, dr, cap, limit, window), reset, t - now, clamped, T, r
end

-- leaky bucket (GCRA) -----------------------------------------------------

-- lb_charge takes a charge of cost that does not fit (algorithm.lbCharge).
local function lb_charge(tat, cost, interval, max_debt)
  local bound = max_debt + MAX_QUEUE
  local c = floor(bound / interval) + 1
  if cost < c then c = cost end
  local debt = tat - now + c * interval
  if debt > bound then debt = bound end
  local r = floor((max_debt - debt) / interval)
  if r < 0 then r = 0 end
  return 0, 1, r, debt, debt + interval - max_debt, true, now + debt
end

local function leaky_bucket(limit, window, burst, cost, tat0, charge)
  local cap = capacity(2, limit, burst)
  local interval = floor((window + limit - 1) / limit)
  local max_debt = cap * interval
  local tat, clamped = tat0, false
  if tat < now then tat = now end
  if tat - now > max_debt + MAX_QUEUE then tat, clamped = now + max_debt, true end
  local base = tat0
  if clamped then base = tat end
  local function remaining(t)
    local r = floor((max_debt - (t - now)) / interval)
    if r > 0 then return r end
    return 0
  end
  if cost > cap then
    if charge then return lb_charge(tat, cost, interval, max_debt) end
    return 0, 2, remaining(tat), tat - now, 0, clamped, base
  end
  -- in debts, not instants: tat + cost·interval may pass 2^53 from EPOCH
  local debt = tat - now + cost * interval
  if debt <= max_debt then
    return 1, 0, remaining(now + debt), debt, 0, true, now + debt
  end
  if charge then return lb_charge(tat, cost, interval, max_debt) end
  return 0, 1, remaining(tat), tat - now, debt - max_debt, clamped, base
end

-- fixed window ------------------------------------------------------------

local function fixed_window(limit, window, cost, T, A, charge)
  local start = wstart(now, window)
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
  if charge and count + cost > limit then
    -- a charge: counted in full (up to MAX_CHARGE), past the limit
    if cost > MAX_CHARGE then cost = MAX_CHARGE end
    count = count + cost
    if count > limit + MAX_CHARGE then count = limit + MAX_CHARGE end
    return 0, 1, 0, finish - now, finish - now, true, start, count
  end
  if cost > limit then
    return 0, 2, remaining(count), reset, 0, rebased, bT, bA
  end
  if count + cost <= limit then
    count = count + cost
    if count == 0 then reset = 0 else reset = finish - now end -- cost 0 on an empty window: whole now
    return 1, 0, remaining(count), reset, 0, true, start, count
  end
  return 0, 1, remaining(count), reset, finish - now, rebased, bT, bA
end

-- sliding window ----------------------------------------------------------

local function sw_counts(window, T, A, B, at)
  local start = wstart(at, window)
  if T == start then return start, A, B, false end
  if T == start - window then return start, 0, A, false end
  if T > start then return start, A, B, true end
  return start, 0, 0, false
end

-- the first instant k calls fit beside prev of the window from start
local function sw_after(window, start, k, prev)
  if k >= prev then return start end
  local q = mul_div(k, window, prev)
  return start + window - q
end

local function sliding_window(limit, window, cost, T, A, B)
  local start, cur, prev, rebased = sw_counts(window, T, A, B, now)
  local bT, bA, bB = T, A, B
  if rebased then bT, bA, bB = start, cur, prev end
  -- limit - cur - ceil(prev·(window - elapsed)/window), exact
  local oq, orr = mul_div_w(prev, window - (now - start), window)
  if orr > 0 then oq = oq + 1 end
  local left = limit - cur - oq
  if left < 0 then left = 0 end
  local function reset_after(c, p)
    if c > 0 then return start + 2 * window - now end
    if p > 0 then return start + window - now end
    return 0
  end
  if cost > limit then
    return 0, 2, left, reset_after(cur, prev), 0, rebased, bT, bA, bB
  end
  if cost <= left then
    cur = cur + cost
    return 1, 0, left - cost, reset_after(cur, prev), 0, true, start, cur, prev
  end
  local t
  if cur + cost <= limit and prev > 0 then
    t = sw_after(window, start, limit - cur - cost, prev)
  elseif cur > 0 then
    t = sw_after(window, start + window, limit - cost, cur)
  else
    t = start + window
  end
  return 0, 1, left, reset_after(cur, prev), t - now, rebased, bT, bA, bB
end

-- sliding log ------------------------------------------------------------

-- A sorted set with one entry per admitted call, not per unit of cost:
-- score the time it was logged (µs), member '<units logged before it, 16
-- digits>:<cost>'. Entries are logged in order (a call is logged at now, or
-- at the newest entry's time if the clock went backwards), so the units
-- in the window are those between the oldest entry's count and the newest
-- entry's count + cost: a call reads two entries and writes one, whatever
-- its cost. See sliding_log.go. The count restarts at 0 whenever the log
-- empties; only a log that never once empties for 28 years at the fastest
-- rule (10,000 calls a ms) would pass 2^53.

local function sl_entry(m)
  local c = find(m, ':', 1, true)
  if not c then return nil end
  return tonumber(sub(m, 1, c - 1)), tonumber(sub(m, c + 1))
end

-- A log written one member per unit with absolute times (before entries
-- carried their cost) is rewritten once: one entry per instant.
local function sl_migrate(key)
  local old = call('ZRANGE', key, 0, -1, 'WITHSCORES')
  call('DEL', key)
  local seq, j = 0, 1
  while j <= #old do
    local at, c = old[j + 1], 0
    while j <= #old and old[j + 1] == at do c, j = c + 1, j + 2 end
    call('ZADD', key, fmt('%d', tonumber(at) - EPOCH), fmt('%016d:%d', seq, c))
    seq = seq + c
  end
end

local function sliding_log(key, limit, window, cost)
  local cutoff = fmt('%d', now - window)
  -- A key of another type (an edited rule) is replaced.
  local pruned = pcall_('ZREMRANGEBYSCORE', key, '-inf', cutoff)
  if type(pruned) == 'table' then
    call('DEL', key)
    pruned = 0
  end
  local changed = pruned > 0
  local n = call('ZCARD', key)
  local count, base, nseq, newest = 0, 0, 0, now
  if n > 0 then
    local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
    local s, c = sl_entry(last[1])
    if not s then
      sl_migrate(key)
      call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
      changed = true
      n = call('ZCARD', key)
      if n > 0 then
        last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
        s, c = sl_entry(last[1])
      end
    end
    if n > 0 then
      nseq, newest = s + c, tonumber(last[2])
      base = sl_entry(call('ZRANGE', key, 0, 0)[1])
      count = nseq - base
    end
  end
  local at = now
  if newest > at then at = newest end
  local remaining = limit - count
  if remaining < 0 then remaining = 0 end
  local reset = 0
  if count > 0 then reset = newest + window - now end
  if cost > limit then
    return 0, 2, remaining, reset, 0, changed, reset
  end
  if count + cost <= limit then
    if cost == 0 then return 1, 0, remaining, reset, 0, changed, reset end -- logs nothing
    local idle = at + window - now
    return 1, 0, limit - count - cost, idle, 0, true, idle, {fmt('%d', at), fmt('%016d:%d', nseq, cost)}
  end
  -- Denied: unit number base + k must leave the window; it is in the last
  -- entry whose count is below it. Binary search by rank: at most 14 reads
  -- for the 10,000 entries a log can hold (algorithm.MaxLogLimit).
  local target = base + count + cost - limit
  local lo, hi = 0, n - 1
  for _ = 1, 32 do
    if lo >= hi then break end
    local mid = ceil((lo + hi) / 2)
    if sl_entry(call('ZRANGE', key, mid, mid)[1]) < target then lo = mid else hi = mid - 1 end
  end
  local t = tonumber(call('ZRANGE', key, lo, lo, 'WITHSCORES')[2])
  return 0, 1, remaining, reset, t + window - now, changed, reset
end

-- evaluate every call -----------------------------------------------------

-- Per key of a call of several keys, what to write once the call is
-- decided: w[3i-2] is 2 when the key allowed, 1 when it denied but its
-- state changed (a clamped debt, a clock that went backwards), else 0;
-- w[3i-1] and w[3i] are the value and expiry (ms, as text: Redis turns a
-- number argument into text with a costly '%.17g'), or for a sliding log
-- the time until it is idle and, when it allowed, {score, member} of its
-- one new entry. A call of one key (the common case) is written at once:
-- nothing can veto it but itself.

-- expiry returns ms as text, from a table of the last few thousand asked
-- (a function library keeps it from run to run): a bucket's expiry is its
-- reset in ms, and the calls of a rule share a few of them.
local xs, xn = {}, 0
local function expiry(ms)
  local t = xs[ms]
  if t then return t end
  if xn >= 4096 then xs, xn = {}, 0 end
  t = fmt('%d', ms)
  xs[ms], xn = t, xn + 1
  return t
end

-- write stores one key's new state: state, val and t as w's above.
local function write(key, state, val, t)
  if type(val) == 'number' then -- a sliding log
    if state == 2 then call('ZADD', key, t[1], t[2]) end
    call('PEXPIRE', key, fmt('%d', ceil(val / 1000) + 1000))
  else
    call('SET', key, val, 'PX', t)
  end
end

-- write the keys first..last of a finished call.
local function flush(keys, w, first, last, vetoed)
  local pass = vetoed and 1 or 2
  for i = first, last do
    local state = w[3 * i - 2]
    if state == pass or state == 1 then
      write(keys[i], state, w[3 * i - 1], w[3 * i])
    end
  end
end

-- take decides one run: keys and args are KEYS and ARGV (header).
local function take(keys, args)
  set_now(args[1])
  local params = args[2]
  local n = #keys
  -- Every string state in one read: a key appears once in a run (the store
  -- sends a call that repeats a key of the run in the next run). MGET, not
  -- GET: a key of another type reads as false instead of failing. A run of
  -- one key (a lone call) answers without building tables.
  local cur, out, w
  if n == 1 then
    cur = call('MGET', keys[1])
  else
    cur = call('MGET', unpk(keys))
    out, w = {pack('<d', now)}, {}
  end
  local first, vetoed = 1, false
  -- the inline path's last state written (F, limit, its text) and last
  -- answer (allowed, remaining, reset, retry, its bytes): a run's new
  -- buckets of one rule share them
  local mF, mLim, mV, mA, mL, mQ, mT, mR

  for i = 1, n do
    local kind, flags, limit, window, burst, cost = sunpack('<BBdddd', params, 34 * i - 33)
    local starts = i == 1
    local charge = false
    if flags >= 4 then -- a charge (only ever sent with a cost > 0)
      charge, flags = true, flags - 4
    end
    if flags >= 2 then -- a new call starts: write the previous one
      if i > 1 then
        flush(keys, w, first, i - 1, vetoed)
        first, vetoed, starts = i, false, true
      end
      flags = flags - 2
    end
    -- a call of this key alone: the next key starts another (its flags byte)
    local alone = starts and (i == n or byte(params, 34 * i + 2) % 4 >= 2)
    local key = keys[i]
    -- The common call, decided here in fewer steps than token_bucket
    -- takes (and with the same decisions and state, as the differential
    -- tests check): one token bucket of whole-µs tokens (tb_whole) alone
    -- in its call, neither a shadow nor a charge, whose state has no
    -- remainder (as token_bucket reads it), and whose debt needs no clamp.
    -- fq is its debt.
    local fq, fI, fcap
    if alone and flags == 0 and not charge and kind == 1 and cost > 0 and window % limit == 0 then
      local T, r, den = decode(cur[i], 1)
      if not T then T, r = NEW, 0 end
      if r ~= 0 and den ~= limit then T, r = T + 1, 0 end -- as token_bucket
      if r == 0 then
        fI, fcap = window / limit, limit
        if burst > 0 then fcap = burst end
        fq = 0
        if T >= now then fq = T - now end
        if cost > fcap or fq > fcap * fI + MAX_QUEUE then fq = nil end
      end
    end
    if fq then
      local aq = (fcap - cost) * fI -- the most debt the call may find
      local allowed, reason, retry = 1, 0, 0
      if fq <= aq then
        fq = fq + cost * fI
        local F = now + fq
        if F ~= mF or limit ~= mLim then -- new buckets of a rule in one run: one state
          mF, mLim, mV = F, limit, encode(1, F, 0, limit)
        end
        local wv = mV
        call('SET', key, wv, 'PX', expiry(ceil(fq / 1000) + 1000))
      else
        -- denied: T >= now here (else fq is 0 <= aq), so T - aq - now is
        -- fq - aq; nothing changed, nothing is written
        allowed, reason, retry = 0, 1, fq - aq
      end
      local left = tbw_left(fq, fI, fcap)
      if n == 1 then return pack('<dBBddd', now, allowed, reason, left, fq, retry) end
      if allowed ~= mA or left ~= mL or fq ~= mQ or retry ~= mT then
        mA, mL, mQ, mT, mR = allowed, left, fq, retry, pack('<BBddd', allowed, reason, left, fq, retry)
      end
      out[i + 1] = mR -- the same answer as the last key's: its bytes again
    else
      local allowed, reason, remaining, reset, retry, changed, wv, wt

      if kind == 5 then
        allowed, reason, remaining, reset, retry, changed, wv, wt = sliding_log(key, limit, window, cost)
      else
        -- A key of another type (a sorted set left by a sliding_log rule) reads
        -- as false: a new bucket, and SET replaces it.
        local f1, f2, f3 = decode(cur[i], kind)
        if not f1 then f1, f2, f3 = NEW, 0, 0 end
        local s1, s2, s3
        if kind == 1 then
          allowed, reason, remaining, reset, retry, changed, s1, s2 = token_bucket(limit, window, burst, cost, f1, f2, f3, charge)
          s3 = limit
        elseif kind == 2 then
          allowed, reason, remaining, reset, retry, changed, s1 = leaky_bucket(limit, window, burst, cost, f1, charge)
        elseif kind == 3 then
          allowed, reason, remaining, reset, retry, changed, s1, s2 = fixed_window(limit, window, cost, f1, f2, charge)
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
        wv, wt = encode(kind, s1, s2, s3), expiry(ceil(idle / 1000) + 1000)
      end

      -- a call of cost 0 reads and writes nothing (but a prune of its
      -- sliding log)
      local state = 0
      if cost == 0 then
        state = 0
      elseif allowed == 1 and not charge then
        state = 2
      elseif charge then
        state = 1 -- a charge is taken whatever the call's other keys say
      elseif changed then
        state = 1
      end
      if alone then
        -- all or nothing over one key: write what it allowed or changed
        if state ~= 0 then write(key, state, wv, wt) end
        if n == 1 then return pack('<dBBddd', now, allowed, reason, remaining, reset, retry) end
        state = 0 -- written: the flush of its call passes over it
      end
      -- in index order, so that w stays an array
      w[3 * i - 2] = state
      w[3 * i - 1] = wv
      w[3 * i] = wt or false
      if allowed == 0 and flags == 0 then vetoed = true end -- flags: 1 = shadow
      out[i + 1] = pack('<BBddd', allowed, reason, remaining, reset, retry)
    end
  end
  flush(keys, w, first, n, vetoed)
  return concat(out)
end
