-- The textbook token bucket that bench/redis.sh measures sluice against,
-- as published in "System Design: How to Design an API Rate Limiter (Token
-- Bucket vs Leaky Bucket)" (PrepVisor, section 4, "Illustrative Redis Lua
-- Script for an Atomic Token Bucket Update"), unchanged: a hash of
-- tokens/last_refill, HMGET, compute, HMSET, EXPIRE 3600. It gets the time
-- from the caller (ARGV[4], seconds) and decides one bucket per call.
--
-- KEYS[1]: rate limit key (e.g., "ratelimit:user_12345")
-- ARGV[1]: bucket capacity (e.g., 100)
-- ARGV[2]: refill rate per second (e.g., 10 tokens/sec)
-- ARGV[3]: requested tokens (e.g., 1)
-- ARGV[4]: current server epoch timestamp in seconds
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local refill_rate = tonumber(ARGV[2])
local requested = tonumber(ARGV[3])
local now = tonumber(ARGV[4])

-- Retrieve current bucket state: [tokens, last_refill_time]
local data = redis.call("HMGET", key, "tokens", "last_refill")
local current_tokens = tonumber(data[1])
local last_refill = tonumber(data[2])

if current_tokens == nil then
  -- Bucket does not exist yet; initialize to full capacity
  current_tokens = capacity
  last_refill = now
else
  -- Calculate tokens accumulated since last request
  local elapsed = math.max(0, now - last_refill)
  local generated_tokens = elapsed * refill_rate
  current_tokens = math.min(capacity, current_tokens + generated_tokens)
  last_refill = now
end

-- Evaluate if sufficient tokens exist
if current_tokens >= requested then
  current_tokens = current_tokens - requested
  redis.call("HMSET", key, "tokens", current_tokens, "last_refill", last_refill)
  -- Set TTL to allow automatic cleanup of inactive keys (e.g. 1 hour)
  redis.call("EXPIRE", key, 3600)
  -- Return [1 = allowed, remaining_tokens, retry_after_seconds = 0]
  return { 1, math.floor(current_tokens), 0 }
else
  -- Rate limited; calculate seconds until next token is available
  local missing = requested - current_tokens
  local retry_after = math.ceil(missing / refill_rate)
  -- Persist state with updated refill timestamp
  redis.call("HMSET", key, "tokens", current_tokens, "last_refill", last_refill)
  redis.call("EXPIRE", key, 3600)
  -- Return [0 = denied, remaining_tokens = 0, retry_after_seconds]
  return { 0, 0, retry_after }
end
