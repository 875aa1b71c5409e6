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
-- the calls of that instant removed from the log.

-- The state codec (decode, encode, tb_parts) is codec.lua, which redis.go
-- puts in front of this file.

local call = redis.call
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
          val = encode(1, tb_parts(took, d))
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
