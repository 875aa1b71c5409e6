#!/usr/bin/env bash
# bench/rls-redis.sh — what one ShouldRateLimit decision on Redis costs,
# this checkout against another build, side by side: the service's CPU
# (user + system time from /proc), Redis's CPU (INFO cpu) and the
# service's heap allocations (runtime Mallocs, from /debug/pprof/heap on
# the admin listener) per decision.
#
# Builds this checkout and BASE (a git ref, default main, from `git
# archive`), starts one redis-server and both services on it (--redis,
# --pprof), with an envoyproxy/ratelimit configuration of a user → method
# → path descriptor tree (1,000,000 a minute, so every call is allowed)
# converted by `sluice rules import`. Then, ROUNDS times, each build in
# turn (the order alternates every round, Redis flushed before each run):
# `sluice bench --grpc --concurrency 64 --grpc-conns 4 --duration
# DURATION`, at RATE calls a second if RATE is set (the same load for
# both: the CPU per decision of a service depends on how many calls share
# a script run), else as fast as they go. Prints every run, then the
# medians.
#
#   bench/rls-redis.sh                          # against main, 5 rounds of 10 s
#   BASE=HEAD~2 ROUNDS=7 RATE=5000 bench/rls-redis.sh
#   PEER=/path/to/ratelimit bench/rls-redis.sh  # against envoyproxy/ratelimit
#
# With PEER, an envoyproxy/ratelimit service binary you built yourself
# (its ./src/service_cmd), that service is "base" in place of BASE: it
# serves the same configuration from a runtime directory on the same
# Redis, with its defaults otherwise (USE_STATSD=false, LOG_LEVEL=warn),
# its heap allocations read from /debug/pprof on its DEBUG_PORT.
#
# Needs go, git, curl, redis-server, redis-cli and python3. Uses free
# loopback ports (PORT: the first of 7 in a row instead). Kills only the
# processes it started.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
RATE=${RATE:-0}
BASE=${BASE:-main}

cd "$(dirname "$0")/.."
. bench/lib.sh
need go git curl redis-server redis-cli python3
no_sluice_env
start_tmp

echo "== build: this checkout and ${PEER:-$BASE}"
go build -o "$tmp/new" ./cmd/sluice
if [ -z "${PEER:-}" ]; then
  mkdir "$tmp/base-src"
  git archive "$BASE" | tar -x -C "$tmp/base-src"
  (cd "$tmp/base-src" && go build -o "$tmp/base" ./cmd/sluice)
fi

if [ -n "${PORT:-}" ]; then p0=$PORT; else free_port; p0=$port; fi
start_redis "$p0"
cat > "$tmp/envoy.yaml" <<'YAML'
domain: sluice
descriptors:
  - key: user
    descriptors:
      - key: method
        descriptors:
          - key: path
            rate_limit:
              unit: minute
              requests_per_unit: 1000000
YAML
"$tmp/new" rules import "$tmp/envoy.yaml" -o "$tmp/rules.yaml"
mkdir -p "$tmp/runtime/ratelimit/config"
cp "$tmp/envoy.yaml" "$tmp/runtime/ratelimit/config/"

builds=(base new)
declare -A spid grpc admin
i=1
for b in "${builds[@]}"; do
  data=127.0.0.1:$((p0 + i)) grpc[$b]=127.0.0.1:$((p0 + i + 1)) admin[$b]=127.0.0.1:$((p0 + i + 2))
  i=$((i + 3))
  if [ "$b" = base ] && [ -n "${PEER:-}" ]; then
    env -i PATH="$PATH" HOME="${HOME:-/tmp}" USE_STATSD=false LOG_LEVEL=warn \
      REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$p0" RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=ratelimit \
      HOST=127.0.0.1 PORT="${data#*:}" GRPC_HOST=127.0.0.1 GRPC_PORT="${grpc[$b]#*:}" \
      DEBUG_HOST=127.0.0.1 DEBUG_PORT="${admin[$b]#*:}" "$PEER" > "$tmp/$b.log" 2>&1 &
    pids+=($!)
    spid[$b]=$!
    wait_up "http://$data/healthcheck"
    continue
  fi
  "$tmp/$b" serve --redis "127.0.0.1:$p0" --rules "$tmp/rules.yaml" --listen "$data" --grpc-listen "${grpc[$b]}" \
    --admin-listen "${admin[$b]}" --pprof --log-level warn 2> "$tmp/$b.log" &
  pids+=($!)
  spid[$b]=$!
  wait_up "http://$data/readyz"
done

redis_cpu() { cli info cpu | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f", s}'; }
mallocs() { curl -fsS "http://${admin[$1]}/debug/pprof/heap?debug=1" | sed -n 's/^# Mallocs = //p'; }
hz=$(getconf CLK_TCK)

echo "== $ROUNDS rounds of $DURATION, rate ${RATE/#0/as fast as they go}; load: $(uptime)"
for round in $(seq "$ROUNDS"); do
  order=("${builds[@]}")
  [ $((round % 2)) = 0 ] && order=(new base)
  for b in "${order[@]}"; do
    cli flushall > /dev/null
    t0=$(cpu_ticks "${spid[$b]}") r0=$(redis_cpu) m0=$(mallocs "$b")
    "$tmp/new" bench --grpc --target "${grpc[$b]}" --concurrency 64 --grpc-conns 4 --duration "$DURATION" \
      --rate "$RATE" --json > "$tmp/$b-$round.json"
    t1=$(cpu_ticks "${spid[$b]}") r1=$(redis_cpu) m1=$(mallocs "$b")
    python3 - "$tmp/$b-$round.json" "$b" "$round" "$t0" "$t1" "$r0" "$r1" "$m0" "$m1" "$hz" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY' | tee -a "$tmp/runs"
import json, sys
f, b, rnd, t0, t1, r0, r1, m0, m1, hz, load = sys.argv[1:]
r = json.load(open(f))
n = r["requests"] - r["errors"]
print("%s %s %.0f %.2f %.2f %.1f %s" % (b, rnd, r["decisions_per_sec"], (int(t1) - int(t0)) / int(hz) * 1e6 / n,
      (float(r1) - float(r0)) * 1e6 / n, (int(m1) - int(m0)) / n, load))
PY
  done
done | awk '{printf "round %s %-4s %8s decisions/s  service %7s µs  redis %6s µs  %5s allocs per decision  (load %s)\n", $2, $1, $3, $4, $5, $6, $7}'

echo "== medians"
for b in "${builds[@]}"; do
  printf '%-4s %8s decisions/s  service %7s µs  redis %6s µs  %5s allocs per decision\n' "$b" \
    "$(awk -v b="$b" '$1 == b {print $3}' "$tmp/runs" | median)" "$(awk -v b="$b" '$1 == b {print $4}' "$tmp/runs" | median)" \
    "$(awk -v b="$b" '$1 == b {print $5}' "$tmp/runs" | median)" "$(awk -v b="$b" '$1 == b {print $6}' "$tmp/runs" | median)"
done
echo "load: $(uptime)"
