-- sluice: lease a batch of a hot bucket's tokens to one instance, and take
-- back what earlier leases left unused. See lease.go and docs/redis.md,
-- "Leases for hot buckets".
--
-- KEYS[1]  the bucket, rl:{<client>}:<rule-id>
-- ARGV[1]  now in µs relative to EPOCH (codec.lua), or "" for TIME
-- ARGV[2..8]  kind (1 token_bucket, 3 fixed_window), limit, window (µs),
--          burst, want (tokens asked), least (fewest worth a lease: the
--          lease is refused when fewer are there), ttl (µs)
-- ARGV[9..] per lease given back: tokens unused, its now, its end (µs
--          relative to EPOCH)
-- returns  a string '<ddddd': now, tokens granted (0: refused), the
--          lease's life (µs from now), the wait until `least` tokens are
--          there (when refused), the time until the bucket is whole again
--
-- A token bucket's lease of n tokens is checked as a take of n at now and
-- charged as n taken at its end e: its full-again instant F becomes
-- max(F, e) + n·I. Think of the lease's unused tokens as still in the
-- bucket: the bucket may not refill past its capacity while they are
-- held, so Redis's own count must stay n below capacity until e, which is
-- F ≥ e + n·I; and no use comes before Redis had the tokens. The admitted
-- calls of every instance together then conform to the bucket. The cost:
-- e is at most the bucket's debt away (F, when F > now: free), but at
-- least ttl/32, whose refill is charged when the bucket is nearer full
-- (under-admission of at most ttl/32's refill per lease, none while demand
-- exceeds the rule: the bucket is then in debt).
--
-- A fixed window's lease lives at most until the window ends: its tokens
-- are counted in the window they are used in.
--
-- Only a token bucket whose token is a whole number of µs (window a
-- multiple of limit) is leased; lease.go never asks for another.

bind()
local kind, limit, window, burst = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local want, least, ttl = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local key = KEYS[1]
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = call('TIME')
  now = (t[1] - EPOCH / 1000000) * 1000000 + t[2]
end

local v = redis.pcall('GET', key)
local T, A, B
if type(v) == 'string' then T, A, B = decode(v, kind) end
if type(v) ~= 'string' or not T then T, A, B = NEW, 0, 0 end -- none, or another algorithm's

if kind == 1 then
  local I = window / limit
  local cap = limit
  if burst > 0 then cap = burst end
  if A ~= 0 then T, A = T + 1, 0 end -- a remainder (another limit's): up to the µs
  -- give back: each lease's unused tokens, not before its end (its charge)
  local j = 9
  while ARGV[j + 2] do
    local k, e = tonumber(ARGV[j]), tonumber(ARGV[j + 2])
    if T ~= NEW and k > 0 then
      T = T - k * I
      if T < e then T = e end
    end
    j = j + 3
  end
  local tq = cap * I -- an empty bucket's debt
  local q = 0
  if T >= now then q = T - now end
  if q > tq + 3600000000 then q, T = tq, now + tq end -- take.lua's MAX_QUEUE
  local avail = 0
  if q < tq then avail = floor((tq - q) / I) end
  local n = want
  if avail < n then n = avail end
  if n < least then
    if j > 9 and T ~= NEW then call('SET', key, encode(1, T, 0, limit), 'PX', fmt('%d', ceil(q / 1000) + 1000)) end
    return pack('<ddddd', now, 0, 0, q - (cap - least) * I, q)
  end
  -- The lease lives until e and is charged at e: F = max(F, e) + n·I.
  -- While the bucket is in debt (F > now) a life up to F costs nothing
  -- more; a bucket nearer full gets a life of at least ttl/32, whose
  -- refill is charged.
  local e = now + ttl
  local base = T
  if base < now then base = now end
  if base < e then
    local life = base - now
    if life < floor(ttl / 32) then life = floor(ttl / 32) end
    e = now + life
  end
  local F = T
  if F < e then F = e end
  F = F + n * I
  call('SET', key, encode(1, F, 0, limit), 'PX', fmt('%d', ceil((F - now) / 1000) + 1000))
  return pack('<ddddd', now, n, e - now, 0, F - now)
end

-- fixed window
if kind ~= 3 then return redis.error_reply('ERR sluice lease: kind ' .. ARGV[2] .. ' is not leased') end
local j = 9
while ARGV[j + 2] do
  local k, t0 = tonumber(ARGV[j]), tonumber(ARGV[j + 1])
  if T ~= NEW and k > 0 and T == wstart(t0, window) then
    A = A - k
    if A < 0 then A = 0 end
  end
  j = j + 3
end
local start = wstart(now, window)
local count = 0
if T >= start then count = A end -- T > start: a clock that went back; keep the count
local left = start + window - now
local avail = limit - count
if avail < 0 then avail = 0 end
local n = want
if avail < n then n = avail end
if n < least then
  if j > 9 and T ~= NEW and T >= start then call('SET', key, encode(3, T, A), 'PX', fmt('%d', ceil((T + window - now) / 1000) + 1000)) end
  return pack('<ddddd', now, 0, 0, left, left)
end
count = count + n
if ttl > left then ttl = left end
call('SET', key, encode(3, start, count), 'PX', fmt('%d', ceil(left / 1000) + 1000))
return pack('<ddddd', now, n, ttl, 0, left)
