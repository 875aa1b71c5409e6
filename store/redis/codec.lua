-- sluice: the state codec shared by take.lua and refund.lua. redis.go
-- puts this file in front of each of them when it loads them, so a state
-- is written and read by one definition.
--
-- State of buckets 1-4 is one string; a state that fits is a decimal
-- integer of at most 19 digits, which Redis keeps in the object itself (see
-- take.lua's header and docs/redis.md); otherwise it is packed with struct.

local pack, sunpack = struct.pack, struct.unpack
local floor, byte, sub, fmt = math.floor, string.byte, string.sub, string.format
local EPOCH = 1600000000000000 -- 2020-09-13T12:26:40Z in µs: decimal times are 15 digits until 2051

-- decode returns the stored state of kind: zeros for no key (a new
-- bucket), nil for the state of another algorithm (left by an edited rule).
local function decode(v, kind)
  if not v then return 0, 0, 0 end
  local b = byte(v, 1)
  if b == kind + 48 then
    if kind == 1 then return tonumber(sub(v, 2, 16)) + EPOCH, tonumber(sub(v, 17)), 0 end
    if kind == 2 then return tonumber(sub(v, 2)), 0, 0 end
    return tonumber(sub(v, 5)) + EPOCH, tonumber(sub(v, 2, 4)), 0
  elseif b == kind then
    if kind == 2 then return sunpack('<d', v, 2), 0, 0 end
    if kind == 4 then return sunpack('<ddd', v, 2) end
    local T, A = sunpack('<dd', v, 2)
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

-- tb_parts returns a token bucket's F = at·1000 + d ns (d a whole number
-- ≥ 0) as its µs and ns parts, by the same float steps as the Go code.
local function tb_parts(at, d)
  local q = floor(d / 1000)
  local r = d - q * 1000
  while r < 0 do r, q = r + 1000, q - 1 end
  while r >= 1000 do r, q = r - 1000, q + 1 end
  return at + q, r
end

