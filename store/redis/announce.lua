-- sluice: register an instance as live and count the live ones.
-- KEYS[1] the registry (a sorted set: member = instance id, score = expiry ms)
-- ARGV[1] instance id, ARGV[2] ttl in ms
-- returns the number of live instances
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return redis.call('ZCARD', KEYS[1])
