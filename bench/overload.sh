#!/usr/bin/env bash
# bench/overload.sh — a saturated `sluice serve --redis` keeps its decisions
# on Redis: local overload is not a Redis failure.
#
# Starts a redis-server (hz 100) and `sluice serve --redis` on loopback
# ports, with two rules:
#   flood  POST /flood, per user, 50 an hour (token bucket): the exhausted
#          bucket — user "flooder" is given its 50 calls first;
#   fresh  GET /api/*, per user, 1e9 a minute: every call a new user, so
#          every call is a script run in Redis (the denial cache cannot
#          answer it) and the process has real Redis work besides HTTP;
# then saturates it with wrk -t2 -c$CONNS -d$DURATION, every other call the
# flooder's, the others fresh users'. Redis, wrk and sluice share the
# machine's cores, so sluice's goroutines wait for CPU: exactly the case in
# which a breaker that counts a call's own time as Redis's would open.
#
# Reports, from sluice's /metrics before and after: decisions by source
# (store, local_denial_cache; local_fallback and unavailable are decisions
# made without Redis), the breaker's openings, the calls to Redis that
# failed, and the flooder's allowed calls against what its bucket can give
# (50 + 50/h × the time since its first call). Exits 1 if any decision was
# made locally, the breaker opened, or the flooder got more than its limit.
#
#   bench/overload.sh                        # wrk -c128 for 60 s
#   CONNS=64 DURATION=30s bench/overload.sh
#   STORE_TIMEOUT=5ms bench/overload.sh      # sluice's --store-timeout
#
# Needs go, wrk, curl, redis-server, redis-cli. Uses 127.0.0.1 ports 18480
# (sluice), 19480 (its admin API), 18479 (redis). Kills only the processes
# it started.
set -euo pipefail

CONNS=${CONNS:-128}
DURATION=${DURATION:-60s}
STORE_TIMEOUT=${STORE_TIMEOUT:-5ms}
SL=127.0.0.1:18480
ADMIN=127.0.0.1:19480
REDIS_PORT=18479

cd "$(dirname "$0")/.."
. bench/lib.sh
need go wrk curl redis-server redis-cli
build_here

echo "== start"
cat > "$tmp/rules.yaml" <<'YAML'
rules:
  - id: flood
    description: bench/overload.sh, the exhausted bucket
    match: {endpoint: "POST /flood"}
    by: user
    limit: 50
    window: 1h
  - id: fresh
    description: bench/overload.sh, a new user every call
    match: {endpoint: "GET /api/*"}
    by: user
    limit: 1000000000
    window: 1m
YAML
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --hz 100 --daemonize no > "$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$tmp/sluice" serve --listen "$SL" --admin-listen "$ADMIN" --rules "$tmp/rules.yaml" \
  --redis "127.0.0.1:$REDIS_PORT" --store-timeout "$STORE_TIMEOUT" --instances 1 --log-level warn 2> "$tmp/sluice.log" &
pids+=($!)
wait_up "http://$SL/readyz"

check() { curl -fsS -X POST "http://$SL/ratelimit/check" -d "$1"; }
flood='{"user":"flooder","endpoint":"POST /flood"}'

echo "== exhaust the flooder's bucket: calls until the first denial"
first=$(date +%s.%N)
for i in $(seq 200); do
  check "$flood" | grep -q '"allowed":false' && break
done
echo "  denied at call $i (want 51)"

# metric NAME [LABEL-SUBSTRING...]: the sum of the samples of NAME whose
# labels contain every substring.
metric() {
  local name=$1; shift
  curl -fsS "http://$SL/metrics" | awk -v name="$name" -v want="$*" '
    BEGIN { n = split(want, w, " ") }
    $1 ~ "^" name "({|$)" {
      ok = 1
      for (i = 1; i <= n; i++) if (index($1, w[i]) == 0) ok = 0
      if (ok) sum += $2
    }
    END { printf "%d\n", sum }'
}
snapshot() { # PREFIX
  local p=$1 src
  for src in store local_denial_cache local_fallback unavailable; do
    eval "${p}_$src=$(metric sluice_decisions_total "source=\"$src\"")"
  done
  eval "${p}_flood_allowed=$(metric sluice_decisions_total 'rule="flood"' 'outcome="allowed"')"
  eval "${p}_fresh=$(metric sluice_decisions_total 'rule="fresh"')"
  eval "${p}_opened=$(metric sluice_store_breaker_openings_total)"
  eval "${p}_errors=$(metric sluice_store_errors_total 'store="redis"')"
  eval "${p}_canceled=$(metric sluice_store_errors_total 'store="redis"' 'kind="canceled"')"
  eval "${p}_overdue=$(metric sluice_store_overdue_total)"
  eval "${p}_probes=$(metric sluice_store_probes_total)"
  eval "${p}_probes_failed=$(metric sluice_store_probes_total 'result="failed"')"
}
snapshot before

echo "== wrk -t2 -c$CONNS -d$DURATION, half the calls the flooder's, half a new user's each"
cat > "$tmp/overload.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local flood = '$flood'
local n = 0
request = function()
  n = n + 1
  if n % 2 == 0 then
    return wrk.format(nil, "/ratelimit/check", nil, flood)
  end
  return wrk.format(nil, "/ratelimit/check", nil,
    '{"user":"u' .. math.random(1, 1000000000) .. '","endpoint":"GET /api/orders"}')
end
LUA
wrk -t2 -c"$CONNS" -d"$DURATION" -s "$tmp/overload.lua" "http://$SL/ratelimit/check" > "$tmp/wrk.txt" 2>&1
last=$(date +%s.%N)
grep -E 'Requests/sec|Latency|requests in|Socket errors|Non-2xx' "$tmp/wrk.txt" | sed 's/^ */  /'
echo "load: $(uptime)"
snapshot after

local_decisions=$(( after_local_fallback - before_local_fallback + after_unavailable - before_unavailable ))
opened=$(( after_opened - before_opened ))
# The flooder's bucket: 50 at first, then 50 an hour from its first call.
flood_max=$(awk -v a="$first" -v b="$last" 'BEGIN { printf "%d", 50 + int((b - a) * 50 / 3600) }')
flood_allowed=$(( after_flood_allowed ))
echo "== during the run"
printf '  decisions: %d by Redis, %d by the denial cache (Redis'"'"'s earlier answer), %d local (local_fallback %d, unavailable %d)\n' \
  $(( after_store - before_store )) $(( after_local_denial_cache - before_local_denial_cache )) "$local_decisions" \
  $(( after_local_fallback - before_local_fallback )) $(( after_unavailable - before_unavailable ))
printf '  new-user calls (each a Redis script run): %d\n' $(( after_fresh - before_fresh ))
printf '  breaker openings: %d; calls to Redis that failed: %d (and %d whose caller hung up, as wrk stopped)\n' "$opened" \
  $(( after_errors - before_errors - after_canceled + before_canceled )) $(( after_canceled - before_canceled ))
printf '  calls still unanswered after %s: %d; probes they made: %d, of which failed: %d\n' "$STORE_TIMEOUT" \
  $(( after_overdue - before_overdue )) $(( after_probes - before_probes )) $(( after_probes_failed - before_probes_failed ))
printf '  flooder: %d calls allowed in all, %d during the run; its bucket allows at most %d\n' \
  "$flood_allowed" $(( after_flood_allowed - before_flood_allowed )) "$flood_max"
echo "  sluice log (warnings):"; sed "s/^/    /" "$tmp/sluice.log" | head -20
status=0
if [ "$local_decisions" -ne 0 ] || [ "$opened" -ne 0 ]; then
  echo "$me: FAIL: $local_decisions decisions made locally, breaker opened $opened times, with Redis healthy" >&2
  status=1
fi
if [ "$flood_allowed" -gt "$flood_max" ]; then
  echo "$me: FAIL: the flooder got $flood_allowed calls, its limit allows $flood_max" >&2
  status=1
fi
[ "$status" -eq 0 ] && echo "ok: no local decision, no breaker opening, no call over the limit"
exit "$status"
