#!/usr/bin/env bash
# bench/gateway.sh — what sluice gateway adds over calling the upstream
# directly, side by side in one run.
#
# Builds sluice, bench/upstream (a bare net/http server answering a small
# fixed JSON body) and bench/httplat, starts the upstream, a gateway on the
# embedded store and a gateway on a redis-server started here (both in
# front of the upstream, one rule matching every call: 1e9 calls a minute
# per client IP, so every call is allowed and the whole decision path runs),
# then, alternating direct / embedded / redis every round so that drift on
# the machine hits all alike:
#
#   1. maximum throughput: wrk -t2 -c64 -d$DURATION, ROUNDS rounds; medians
#      and each gateway's ratio to direct;
#   2. latency at a fixed rate below saturation: bench/httplat (the
#      internal/loadgen engine of `sluice bench`, plain GETs, latency from
#      the scheduled send time) at $RATE calls/s, each call from one of
#      $CLIENTS addresses (X-Forwarded-For; the gateways trust 127.0.0.1);
#      medians of p50/p90/p99/p99.9 and what each gateway adds.
#
#   bench/gateway.sh                          # 3 rounds, 10 s runs, 2000 calls/s
#   ROUNDS=5 DURATION=20s RATE=5000 bench/gateway.sh
#
# Needs go, wrk, curl and redis-server (without it the Redis gateway is
# skipped). Uses 127.0.0.1 ports 18100 (upstream), 18000/19000 (embedded
# gateway, admin), 18001/19001 (Redis gateway, admin), 18379 (redis).
# Kills only the processes it started.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
RATE=${RATE:-2000}
RATE_DURATION=${RATE_DURATION:-10s}
CLIENTS=${CLIENTS:-10000}
UP=127.0.0.1:18100
GWM=127.0.0.1:18000
GWR=127.0.0.1:18001
REDIS_PORT=18379
PATH_=/api/orders

cd "$(dirname "$0")/.."
. bench/lib.sh
need go wrk curl
no_sluice_env

start_tmp

echo "== build"
build_sluice
go build -o "$tmp/upstream" ./bench/upstream
go build -o "$tmp/httplat" ./bench/httplat
echo "load: $(uptime)"

echo "== start"
cat > "$tmp/rules.yaml" <<'YAML'
rules:
  - id: bench-per-ip
    description: bench/gateway.sh, every call allowed
    by: ip
    limit: 1000000000
    window: 1m
YAML
cp "$tmp/rules.yaml" "$tmp/rules-redis.yaml"
"$tmp/upstream" -listen "$UP" 2> "$tmp/upstream.log" &
pids+=($!)
common=(--upstream "http://$UP" --trusted-proxies 127.0.0.1 --log-level warn)
"$tmp/sluice" gateway --listen "$GWM" --admin-listen 127.0.0.1:19000 --rules "$tmp/rules.yaml" "${common[@]}" 2> "$tmp/gw-embedded.log" &
pids+=($!)
targets=("direct=http://$UP$PATH_" "gw-embedded=http://$GWM$PATH_")
if command -v redis-server >/dev/null; then
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --hz 100 --daemonize no > "$tmp/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  "$tmp/sluice" gateway --listen "$GWR" --admin-listen 127.0.0.1:19001 --rules "$tmp/rules-redis.yaml" \
    --redis "127.0.0.1:$REDIS_PORT" "${common[@]}" 2> "$tmp/gw-redis.log" &
  pids+=($!)
  targets+=("gw-redis=http://$GWR$PATH_")
else
  echo "gateway.sh: redis-server not found: the Redis gateway is skipped" >&2
fi

for t in "${targets[@]}"; do
  wait_up "${t#*=}"
  echo "${t%%=*}: $(curl -fsS -D - -o /dev/null "${t#*=}" | tr -d '\r' | grep -iE '^(HTTP|x-ratelimit-remaining|ratelimit-policy)' | tr '\n' ' ')"
done


echo "== wrk -t2 -c64 -d$DURATION, $ROUNDS rounds, ${targets[*]%%=*} in turn"
declare -A rps
for round in $(seq "$ROUNDS"); do
  line="round $round:"
  for t in "${targets[@]}"; do
    name=${t%%=*} url=${t#*=}
    out="$tmp/wrk-$name-$round.txt"
    wrk -t2 -c64 -d"$DURATION" "$url" > "$out" 2>&1
    if grep -qE 'Non-2xx|Socket errors' "$out"; then
      echo "gateway.sh: wrk against $name saw errors:" >&2
      grep -E 'Non-2xx|Socket errors' "$out" >&2
    fi
    r=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$out")
    rps[$name]="${rps[$name]:-} $r"
    line+=$(printf '  %s %8d req/s' "$name" "$r")
  done
  echo "$line"
done
direct=$(printf '%s\n' ${rps[direct]} | median)
printf 'median: direct %.0f req/s' "$direct"
for t in "${targets[@]:1}"; do
  name=${t%%=*}
  m=$(printf '%s\n' ${rps[$name]} | median)
  printf ', %s %.0f req/s (%.3f of direct)' "$name" "$m" "$(awk -v a="$m" -v b="$direct" 'BEGIN {print a/b}')"
done
echo

echo "== fixed rate: httplat -rate $RATE -duration $RATE_DURATION -rounds $ROUNDS -clients $CLIENTS"
"$tmp/httplat" -rate "$RATE" -duration "$RATE_DURATION" -rounds "$ROUNDS" -clients "$CLIENTS" "${targets[@]}"
echo "load: $(uptime)"
