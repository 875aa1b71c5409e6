-- sluice: give back what take.lua took, for a call that another shard of
-- the same call denied (cross-shard all-or-nothing on a Redis Cluster).
--
-- KEYS[i]  the buckets that took (same {hash tag})
-- ARGV[1]  the now the take ran at (µs relative to EPOCH, as take.lua's)
-- ARGV[2 + 5(i-1) ...] per key: kind, limit, window (µs), burst, cost
-- returns  the number of buckets given back to
--
-- Time may have passed since the take, so each algorithm reverses its own
-- step where the state still shows it: the token bucket's full-again
-- instant F moved back by the cost (not before the take: a full bucket
-- stays full), the TAT moved back, the count of the same window lowered,
-- the log's newest entry removed if it is the take's.

-- The state codec (decode, encode, mul_div, EPOCH) is codec.lua, which
-- redis.go puts in front of this file.

bind()
local took = tonumber(ARGV[1])
local done = 0

for i = 1, #KEYS do
  local key = KEYS[i]
  local a = 2 + (i - 1) * 5
  local kind, limit, window = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local burst, cost = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  if kind == 5 then
    local last = redis.pcall('ZRANGE', key, -1, -1, 'WITHSCORES')
    if type(last) == 'table' and #last == 2 and tonumber(last[2]) >= took then
      local c = string.find(last[1], ':', 1, true)
      if c and tonumber(string.sub(last[1], c + 1)) == cost then
        call('ZREM', key, last[1])
        done = done + 1
      end
    end
  else
    local v = redis.pcall('GET', key)
    local T, A, B
    if type(v) == 'string' then T, A, B = decode(v, kind) end
    local val
    if T and T ~= NEW then
      if kind == 1 then
        -- T, A, B: F's µs, its remainder and the limit it counts in. The
        -- take added cost·window/limit to the debt; F goes back by as much,
        -- not before took.
        if A ~= 0 and B ~= limit then T, A = T + 1, 0 end
        local cq, cr = mul_div(cost, window, limit)
        T, A = T - cq, A - cr
        if A < 0 then T, A = T - 1, A + limit end
        if T < took then T, A = took, 0 end
        val = encode(1, T, A, limit)
      elseif kind == 2 then
        local interval = floor((window + limit - 1) / limit)
        val = encode(2, T - cost * interval)
      elseif kind == 3 then
        if T == wstart(took, window) then
          A = A - cost
          if A < 0 then A = 0 end
          val = encode(3, T, A)
        end
      else
        local start = wstart(took, window)
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
