-- sluice: the state codec and exact arithmetic shared by take.lua and
-- refund.lua. redis.go puts this file in front of each of them when it
-- loads them, so a state is written and read by one definition.
--
-- Times are µs relative to EPOCH (2020-09-13T12:26:40Z): every instant an
-- int64 of ns can name (1677…2262), plus the longest refill a rule may have
-- (algorithm.MaxRefill, 40 × 366 days), is below 2^53 from there, so a Lua
-- double holds every time exactly. Absolute µs would not: 2^53 µs is 2255.
--
-- State of buckets 1-4 is one string; a state that fits is a decimal
-- integer of at most 19 digits, which Redis keeps in the object itself (see
-- take.lua's header and docs/redis.md); otherwise it is packed with struct.

-- Redis gives a function library its libraries (math, string, table,
-- struct, redis.call, unpack) only while a function runs, not while the
-- library loads: bind takes them on a run's first need (every run of a
-- script, the first run of the library). Both scripts call it first.
local pack, sunpack, floor, ceil, byte, sub, find, fmt, concat, unpk, call, pcall_
local function bind()
  pack, sunpack = struct.pack, struct.unpack
  floor, ceil = math.floor, math.ceil
  byte, sub, find, fmt = string.byte, string.sub, string.find, string.format
  concat, unpk, call, pcall_ = table.concat, unpack, redis.call, redis.pcall
end
local EPOCH = 1600000000000000 -- µs; decimal times are 15 digits until 2051
local NEW = -9007199254740992 -- a time before any other: the state of a new bucket

-- decode returns the stored state of kind, times relative to EPOCH: NEW for
-- no key (a new bucket), nil for the state of another algorithm (left by
-- an edited rule). A token bucket's state is (F µs, remainder, limit the
-- remainder counts in); a leaky bucket's (TAT); a window's (start, count,
-- previous count). States written before times were relative (absolute
-- times; a token bucket's F in ns) are read as they were meant, a
-- fraction of a µs rounded up.
local function decode(v, kind)
  if not v then return NEW, 0, 0 end
  local b = byte(v, 1)
  if b == kind + 48 then
    if kind == 1 then
      if #v == 19 then -- '1<F µs - EPOCH, 15 digits><F ns part, 3 digits>'
        local F = tonumber(sub(v, 2, 16))
        if tonumber(sub(v, 17)) > 0 then F = F + 1 end
        return F, 0, 0
      end
      return tonumber(sub(v, 2)), 0, 0
    end
    if kind == 2 then
      if #v == 16 then return tonumber(sub(v, 2)), 0, 0 end
      return tonumber(sub(v, 2)) - EPOCH, 0, 0 -- absolute
    end
    return tonumber(sub(v, 5)), tonumber(sub(v, 2, 4)), 0
  elseif b == kind + 16 then
    if kind == 2 then return sunpack('<d', v, 2), 0, 0 end
    if kind == 3 then
      local T, A = sunpack('<dd', v, 2)
      return T, A, 0
    end
    return sunpack('<ddd', v, 2)
  elseif b == kind then -- packed with absolute times
    if kind == 2 then return sunpack('<d', v, 2) - EPOCH, 0, 0 end
    if kind == 4 then
      local T, A, B = sunpack('<ddd', v, 2)
      return T - EPOCH, A, B
    end
    local T, A = sunpack('<dd', v, 2)
    if kind == 1 then
      if A > 0 then T = T + 1 end
      return T - EPOCH, 0, 0
    end
    return T - EPOCH, A, 0
  end
  return nil
end

-- encode returns the string of a state (times relative to EPOCH).
local function encode(kind, s1, s2, s3)
  local small = s1 >= 0 and s1 < 1e15
  if kind == 1 then -- s1, s2, s3: F µs, remainder, its limit
    if s2 == 0 and small then return fmt('1%015d', s1) end
    return pack('<Bddd', 17, s1, s2, s3)
  elseif kind == 2 then
    if small then return fmt('2%015d', s1) end
    return pack('<Bd', 18, s1)
  elseif kind == 3 then
    if s2 >= 0 and s2 < 1000 and small then return fmt('3%03d%015d', s2, s1) end
    return pack('<Bdd', 19, s1, s2)
  end
  return pack('<Bddd', 20, s1, s2, s3)
end

-- mul_div returns q, r with m·w = q·l + r, 0 <= r < l, exactly, for
-- m, l < 2^30 and w < 2^45: m is split in two halves of 15 bits so that no
-- product passes 2^53. algorithm.mulDiv in Go.
local function mul_div(m, w, l)
  local wq = floor(w / l)
  local wr = w - wq * l
  local mh = floor(m / 32768)
  local ml = m - mh * 32768
  local a = mh * wr
  local aq = floor(a / l)
  local b = (a - aq * l) * 32768 + ml * wr
  local bq = floor(b / l)
  return m * wq + aq * 32768 + bq, b - bq * l
end

-- mul_div_w is mul_div for l < 2^45: long multiplication of m (< 2^30) in
-- five digits of base 64, every partial value below 2^52.
-- algorithm.mulDivW in Go.
local function mul_div_w(m, w, l)
  local wq = floor(w / l)
  local wr = w - wq * l
  local q, r = 0, 0
  for i = 4, 0, -1 do
    local p = 64 ^ i
    local d = floor(m / p) % 64
    local x = r * 64 + d * wr
    local xq = floor(x / l)
    q, r = q * 64 + xq, x - xq * l
  end
  return m * wq + q, r
end

-- wstart is the start of the window of `at`: windows are aligned to the
-- Unix epoch, in multiples of window.
local function wstart(at, window)
  return at - (at % window + EPOCH % window) % window
end
