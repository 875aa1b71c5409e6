-- sluice: give back what take.lua took, for a call that another shard of
-- the same call denied (cross-shard all-or-nothing).
--
-- KEYS[i]  the buckets that took (same {hash tag})
-- ARGV[1]  the now (µs) the take ran at
-- ARGV[2 + 5(i-1) ...] per key: kind, limit, window (µs), burst, cost
-- returns  the number of buckets given back to
--
-- Time may have passed since the take, so each algorithm reverses its own
-- step where the state still shows it: tokens back (capped), the TAT moved
-- back, the count of the same window lowered, the calls of that instant
-- removed from the log.

local call, pack, unpack = redis.call, struct.pack, struct.unpack
local floor = math.floor
local took = tonumber(ARGV[1])
local done = 0

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
    if type(v) == 'string' and string.byte(v, 1) == kind then
      local val
      if kind == 1 then
        local T, A = unpack('<dd', v, 2)
        local cap = limit
        if burst > 0 then cap = burst end
        A = A + cost
        if A > cap then A = cap end
        val = pack('<Bdd', kind, T, A)
      elseif kind == 2 then
        local tat = unpack('<d', v, 2)
        local interval = floor((window + limit - 1) / limit)
        val = pack('<Bd', kind, tat - cost * interval)
      elseif kind == 3 then
        local T, A = unpack('<dd', v, 2)
        if T == took - took % window then
          A = A - cost
          if A < 0 then A = 0 end
          val = pack('<Bdd', kind, T, A)
        end
      else
        local T, A, B = unpack('<ddd', v, 2)
        local start = took - took % window
        if T == start then
          A = A - cost
          if A < 0 then A = 0 end
        elseif T == start + window then
          B = B - cost
          if B < 0 then B = 0 end
        end
        val = pack('<Bddd', kind, T, A, B)
      end
      if val then
        call('SET', key, val, 'KEEPTTL')
        done = done + 1
      end
    end
  end
end
return done
