-- wrk script for POST /ratelimit/check: each request names a random client
-- of a 100k keyspace ("user": "u<n>") and the endpoint "GET /api/orders".
--   wrk -t2 -c64 -d10s -s bench/check.lua http://127.0.0.1:18080

wrk.method = "POST"
wrk.path = "/ratelimit/check"
wrk.headers["Content-Type"] = "application/json"

local keyspace = 100000
local threads = 0

-- setup runs once per thread in the main state: number the threads so that
-- each seeds its own random sequence.
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function init(args)
  math.randomseed(os.time() * 1000 + (tid or 0))
end

function request()
  local body = string.format('{"user":"u%d","endpoint":"GET /api/orders"}', math.random(0, keyspace - 1))
  return wrk.format(nil, nil, nil, body)
end
