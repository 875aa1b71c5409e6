-- sluice: give back what take.lua took, for a call that another shard of
-- the same call denied (cross-shard all-or-nothing on a Redis Cluster).
--
-- KEYS[i]  the buckets that took (same {hash tag})
-- ARGV[1]  the now (µs) the take ran at
-- ARGV[2 + 5(i-1) ...] per key: kind, limit, window (µs), burst, cost
-- returns  the number of buckets given back to
--
-- Time may have passed since the take, so each algorithm reverses its own
-- step where the state still shows it: the token bucket's full-again
-- instant F moved back by the cost (not before the take: a full bucket
-- stays full), the TAT moved back, the count of the same window lowered,
-- the calls of that instant removed from the log. The state codec is
-- take.lua's.

local call, pack, unpack = redis.call, struct.pack, struct.unpack
local floor, byte, sub, fmt = math.floor, string.byte, string.sub, string.format
local EPOCH = 1600000000000000
local took = tonumber(ARGV[1])
local done = 0

-- decode and encode: as in take.lua, except that decode returns nil for
-- the state of another algorithm.
local function decode(v, kind)
  if not v then return 0, 0, 0 end
  local b = byte(v, 1)
  if b == kind + 48 then
    if kind == 1 then return tonumber(sub(v, 2, 16)) + EPOCH, tonumber(sub(v, 17)), 0 end
    if kind == 2 then return tonumber(sub(v, 2)), 0, 0 end
    return tonumber(sub(v, 5)) + EPOCH, tonumber(sub(v, 2, 4)), 0
  elseif b == kind then
    if kind == 2 then return unpack('<d', v, 2), 0, 0 end
    if kind == 4 then return unpack('<ddd', v, 2) end
    local T, A = unpack('<dd', v, 2)
    return T, A, 0
  end
  return nil
end

local function encode(kind, s1, s2, s3)
  if kind == 2 then
    if s1 >= 0 and s1 < 1e17 and s1 == floor(s1) then return fmt('2%d', s1) end
    return pack('<Bd', 2, s1)
  elseif kind == 4 then
    return pack('<Bddd', 4, s1, s2, s3)
  end
  local t = s1 - EPOCH
  if kind == 1 then -- s1, s2: F's µs and ns parts
    if t >= 0 and t < 1e15 then return fmt('1%015d%03d', t, s2) end
  elseif s2 >= 0 and s2 < 1000 and s2 == floor(s2) and t >= 0 and t < 1e15 and t == floor(t) then
    return fmt('3%03d%015d', s2, t)
  end
  return pack('<Bdd', kind, s1, s2)
end

for i = 1, #KEYS do
  local key = KEYS[i]
  local a = 2 + (i - 1) * 5
  local kind, limit, window = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local burst, cost = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  if kind == 5 then
    local members = call('ZRANGEBYSCORE', key, took, took, 'LIMIT', 0, cost)
    if #members > 0 then
      for j = 1, #members do call('ZREM', key, members[j]) end
      done = done + 1
    end
  else
    local v = redis.pcall('GET', key)
    local T, A, B
    if type(v) == 'string' then T, A, B = decode(v, kind) end
    local val
    if T then
      if kind == 1 then
        -- T, A: F's µs and ns parts. The take set F = took + floor(d + inc)
        -- ns, so F - floor(inc) is the F it found (or took, if full then).
        if T > 0 then
          local d = (T - took) * 1000 + A - floor(cost * window * 1000 / limit)
          if d < 0 then d = 0 end
          local q = floor(d / 1000)
          local r = d - q * 1000
          while r < 0 do r, q = r + 1000, q - 1 end
          while r >= 1000 do r, q = r - 1000, q + 1 end
          val = encode(1, took + q, r)
        end
      elseif kind == 2 then
        local interval = floor((window + limit - 1) / limit)
        val = encode(2, T - cost * interval)
      elseif kind == 3 then
        if T == took - took % window then
          A = A - cost
          if A < 0 then A = 0 end
          val = encode(3, T, A)
        end
      else
        local start = took - took % window
        if T == start then
          A = A - cost
          if A < 0 then A = 0 end
        elseif T == start + window then
          B = B - cost
          if B < 0 then B = 0 end
        end
        val = encode(4, T, A, B)
      end
    end
    if val then
      call('SET', key, val, 'KEEPTTL')
      done = done + 1
    end
  end
end
return done
