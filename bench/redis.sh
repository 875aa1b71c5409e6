#!/usr/bin/env bash
# bench/redis.sh — sluice's Redis path against the textbook token-bucket
# script (bench/redis/textbook.lua), in decisions per Redis CPU-second.
#
# Starts its own redis-server on a free loopback port (no persistence, hz
# 100: see docs/redis.md, "Operating Redis") and,
# for ROUNDS rounds, alternating so that drift on the machine hits both:
#   (a) textbook: SCRIPT LOAD, then
#       redis-benchmark -P 16 -c 50 -n 2000000 -r 1000000 \
#         EVALSHA <sha> 1 rl:__rand_int__ 100 10 1 <now>
#   (b) sluice: bench/redis (limiter.Limiter over store/redis, one
#       token_bucket rule of 100 per 10 s per user, 256 concurrent callers,
#       random users of a 1M keyspace), 2,000,000 decisions;
# each from an empty database, measuring decisions/s and the server's CPU
# time (INFO cpu used_cpu_user + used_cpu_sys, before and after). Then:
#   (c) the latency of single decisions on an idle server: 20,000 Checks
#       one after another;
#   (d) the latency at half of (b)'s throughput: a fixed-rate schedule,
#       latency counted from each call's intended send time.
# Prints each round, the medians and the ratio sluice/textbook (the target:
# ≥ 1.5).
#
#   bench/redis.sh                      # 3 rounds
#   ROUNDS=5 bench/redis.sh
#   HZ=10 bench/redis.sh                # Redis's default hz, for comparison
#   BENCH_ARGS='-batch-concurrency 2' bench/redis.sh   # more bench/redis flags
#
# Needs go, redis-server, redis-cli and redis-benchmark (Debian:
# redis-server, redis-tools). The client and the server share the machine:
# the engine runs with GOMAXPROCS=$ENGINE_PROCS (default 1), so that on 2
# cores each has one. Kills only the server it started.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
N=${N:-2000000}
KEYSPACE=${KEYSPACE:-1000000}
CONCURRENCY=${CONCURRENCY:-256}
SEQ_CALLS=${SEQ_CALLS:-20000}
RATE_DURATION=${RATE_DURATION:-10s}
# The engine process runs on one core, Redis on the other: in production
# they are different machines. Letting the engine's goroutines take both
# cores slowed Redis itself (its CPU time per script call rose by 8-13 %,
# and decisions/s fell) on this 2-core VM.
ENGINE_PROCS=${ENGINE_PROCS:-1}
# How often Redis runs its background tasks, among them expiring keys. At
# Redis's default (10) one expiry cycle may hold the server for 25 ms; sluice
# writes a short-lived key per new client, and at tens of thousands of new
# clients a second those cycles made the p99 (docs/redis.md).
HZ=${HZ:-100}
BENCH_ARGS=${BENCH_ARGS:-}

cd "$(dirname "$0")/.."
. bench/lib.sh
need go redis-server redis-cli redis-benchmark

tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# A free loopback port: nothing answers on it.
port=""
for _ in $(seq 50); do
  p=$((20000 + RANDOM % 20000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[ -n "$port" ] || { echo "redis.sh: no free port" >&2; exit 1; }

echo "== build"
go build -o "$tmp/bench" ./bench/redis
redis-server --version

echo "== start redis-server on 127.0.0.1:$port"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
  --hz "$HZ" --latency-monitor-threshold 1 \
  --logfile "$tmp/redis.log" --daemonize no &
pid=$!
cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
for _ in $(seq 100); do
  [ "$(cli ping 2>/dev/null)" = PONG ] && break
  sleep 0.1
done
[ "$(cli ping 2>/dev/null)" = PONG ] || { echo "redis.sh: redis-server did not start" >&2; cat "$tmp/redis.log" >&2; exit 1; }

cpu() { cli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.3f", s}'; }

# textbook: one run of redis-benchmark; prints "decisions/s decisions-per-cpu-s".
textbook() {
  cli flushall >/dev/null
  cli config resetstat >/dev/null
  local sha now c0 c1 out rps calls failed
  sha=$(cli script load "$(cat bench/redis/textbook.lua)")
  now=$(date +%s)
  c0=$(cpu)
  out=$(redis-benchmark -h 127.0.0.1 -p "$port" -P 16 -c 50 -n "$N" -r "$KEYSPACE" --csv \
    EVALSHA "$sha" 1 rl:__rand_int__ 100 10 1 "$now")
  c1=$(cpu)
  rps=$(printf '%s\n' "$out" | awk -F'"' 'NR == 2 {print $4}')
  calls=$(cli info commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*failed_calls=\([0-9]*\).*/\1 \2/p')
  failed=${calls#* }
  if [ "${calls% *}" != "$N" ] || [ "$failed" != 0 ]; then
    echo "redis.sh: textbook: evalsha calls/failed = $calls, want $N/0" >&2; exit 1
  fi
  keys=$(cli dbsize)
  awk -v rps="$rps" -v n="$N" -v c0="$c0" -v c1="$c1" -v keys="$keys" \
    'BEGIN {printf "%.0f %.0f %.3f %d\n", rps, n / (c1 - c0), c1 - c0, keys}'
}

# sluice ARGS...: one run of bench/redis; prints its RESULT fields.
sluice() {
  cli flushall >/dev/null
  cli config resetstat >/dev/null
  cli latency reset >/dev/null
  # shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
  GOMAXPROCS="$ENGINE_PROCS" "$tmp/bench" -redis "127.0.0.1:$port" "$@" $BENCH_ARGS > "$tmp/sluice.out"
  grep '^RESULT' "$tmp/sluice.out" | sed 's/^RESULT //'
}
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

echo "== (a) textbook vs (b) sluice: $N decisions over $KEYSPACE keys, $ROUNDS rounds"
tb=() sl=() slrate=()
for round in $(seq "$ROUNDS"); do
  textbook > "$tmp/textbook.out"
  read -r trps tcpu tsec tkeys < "$tmp/textbook.out"
  r=$(sluice -duration 120s -requests "$N" -concurrency "$CONCURRENCY" -keyspace "$KEYSPACE")
  srps=$(field "$r" decisions_per_s) scpu=$(field "$r" decisions_per_cpu_s) ssec=$(field "$r" redis_cpu_s)
  tb+=("$tcpu") sl+=("$scpu") slrate+=("$srps")
  printf 'round %d: textbook %7.0f decisions/s, %6.3f Redis CPU-s, %7.0f per CPU-s (%d keys) | sluice %7.0f decisions/s, %6.3f Redis CPU-s, %7.0f per CPU-s, p99 %s µs | ratio %.2f\n' \
    "$round" "$trps" "$tsec" "$tcpu" "$tkeys" "$srps" "$ssec" "$scpu" "$(field "$r" p99_us)" "$(awk -v s="$scpu" -v t="$tcpu" 'BEGIN {print s / t}')"
done
mt=$(printf '%s\n' "${tb[@]}" | median)
ms=$(printf '%s\n' "${sl[@]}" | median)
mr=$(printf '%s\n' "${slrate[@]}" | median)
ratio=$(awk -v s="$ms" -v t="$mt" 'BEGIN {printf "%.2f", s / t}')
verdict=$(awk -v r="$ratio" 'BEGIN {print (r >= 1.5 ? "meets" : "is below")}')
printf 'median: textbook %.0f, sluice %.0f decisions per Redis CPU-second: ratio %s (%s the 1.5 target); sluice %.0f decisions/s\n' \
  "$mt" "$ms" "$ratio" "$verdict" "$mr"
echo "sluice, last round:"
sed -n '1,/^RESULT/p' "$tmp/sluice.out" | grep -v '^RESULT'

echo "== (c) single decisions on an idle server: $SEQ_CALLS sequential Checks"
sluice -duration 120s -requests "$SEQ_CALLS" -concurrency 1 -keyspace "$KEYSPACE" > /dev/null
sed -n '1,/^RESULT/p' "$tmp/sluice.out" | grep -v '^RESULT'

half=$(awk -v r="$mr" 'BEGIN {printf "%.0f", r / 2}')
echo "== (d) fixed rate at half of (b): $half decisions/s for $RATE_DURATION, latency from the intended send time"
sluice -duration "$RATE_DURATION" -rate "$half" -concurrency "$CONCURRENCY" -keyspace "$KEYSPACE" > /dev/null
sed -n '1,/^RESULT/p' "$tmp/sluice.out" | grep -v '^RESULT'
# Redis's own stalls during (d) (LATENCY LATEST: event, time, latest ms, max ms).
echo "Redis events over 1 ms during (d), max ms: $(cli latency latest | paste -d' ' - - - - | awk '{printf "%s %s; ", $1, $4}')"
