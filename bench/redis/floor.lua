#!lua name=sluice_bench_floor
-- The least a script run that decides on the server's clock does: read the
-- clock (TIME), read the bucket (GET), write it back with an expiry (SET PX)
-- and answer a 34-byte string, as take.lua does for a lone call of one key,
-- with no decision between. bench/redis -mode floor runs it once per
-- decision: what any exact limiter that runs one script per decision pays
-- Redis, whatever its arithmetic.
redis.register_function('sluice_bench_floor', function(keys, args)
  local t = redis.call('TIME')
  redis.call('GET', keys[1])
  redis.call('SET', keys[1], '1' .. t[1] .. '00000', 'PX', '2000')
  return '0123456789abcdef0123456789abcdef01'
end)
