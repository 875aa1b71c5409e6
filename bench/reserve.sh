#!/usr/bin/env bash
# bench/reserve.sh — what a reservation costs Redis beside a check: Redis
# CPU per 1,000 decisions at one fixed rate, side by side.
#
# Starts its own redis-server on a free loopback port (PORT to choose it;
# no persistence, hz 100, as bench/redis.sh) and, for ROUNDS rounds, in
# turn so that drift on the machine hits every contender, runs bench/redis
# at RATE decisions/s for RATE_DURATION over KEYSPACE users (one
# token_bucket rule of 100 per 10 s per user, 256 callers):
#   check             Limiter.Check, as sluice serves it (calls made at the
#                     same time share a script run);
#   check-unbatched   Limiter.Check with -max-batch 1: one script run per
#                     call;
#   reserve           Limiter.Reserve, max wait 1 s (reservations made at
#                     the same time share a script run, as checks do):
#                     over a large keyspace
#                     nearly every bucket has room, so the wait is 0;
#   reserve-unbatched Limiter.Reserve, max wait 1 s, with -max-batch 1:
#                     one script run per reservation, beside
#                     check-unbatched (the same structure: what the scripts
#                     themselves cost, whatever the runs' sharing);
#   reserve-queued    Limiter.Reserve over QUEUED_KEYSPACE users, max wait
#                     1 h: each user is asked for faster than its rule's
#                     rate, so every reservation waits behind the others.
# Each run reads the server's used_cpu_user + used_cpu_sys (INFO cpu)
# before and after. Prints every run, then the medians and the ratios
# reserve/check.
#
#   bench/reserve.sh                       # 3 rounds, 5,000/s, 10 s each
#   ROUNDS=5 RATE=10000 bench/reserve.sh
#   BASELINE=/tmp/bench-old bench/reserve.sh
#       # also reserve and reserve-queued with a bench/redis built from
#       # another commit, in the same rounds (reserve@baseline, …)
#
# Needs go, redis-server and redis-cli. The engine runs with
# GOMAXPROCS=$ENGINE_PROCS (default 1), so that on 2 cores it and Redis
# each have one. Kills only the server it started.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
RATE=${RATE:-5000}
RATE_DURATION=${RATE_DURATION:-10s}
KEYSPACE=${KEYSPACE:-1000000}
QUEUED_KEYSPACE=${QUEUED_KEYSPACE:-100}
CONCURRENCY=${CONCURRENCY:-256}
ENGINE_PROCS=${ENGINE_PROCS:-1}
HZ=${HZ:-100}
PORT=${PORT:-}
BASELINE=${BASELINE:-}

cd "$(dirname "$0")/.."
. bench/lib.sh
need go redis-server redis-cli

start_tmp

free_port

echo "== build"
go build -o "$tmp/bench" ./bench/redis
if [ -n "$BASELINE" ]; then
  cp "$BASELINE" "$tmp/baseline"
fi
redis-server --version

echo "== start redis-server on 127.0.0.1:$port"
start_redis "$port" --hz "$HZ"

field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# run CONTENDER ARGS...: one run of bench/redis (the baseline's for a
# CONTENDER ending in @baseline) from an empty database.
run() {
  local name=$1 r bin=$tmp/bench
  shift
  case $name in *@baseline) bin=$tmp/baseline ;; esac
  cli flushall >/dev/null
  cli config resetstat >/dev/null
  GOMAXPROCS="$ENGINE_PROCS" "$bin" -redis "127.0.0.1:$port" -duration "$RATE_DURATION" -rate "$RATE" \
    -concurrency "$CONCURRENCY" "$@" > "$tmp/bench.out"
  r=$(grep '^RESULT' "$tmp/bench.out" | sed 's/^RESULT //')
  echo "$name $(field "$r" cpu_ms_per_1000) $(field "$r" decisions) $(field "$r" calls) $(field "$r" usec_per_call) $(field "$r" p99_us)" >> "$tmp/runs"
  printf '  %-24s %6.2f ms Redis CPU per 1,000 | %7s decisions in %6s script runs (%s), %6s µs per run inside Redis | p99 %8s µs | %s late\n' \
    "$name" "$(field "$r" cpu_ms_per_1000)" "$(field "$r" decisions)" "$(field "$r" calls)" "$(field "$r" command)" \
    "$(field "$r" usec_per_call)" "$(field "$r" p99_us)" "$(field "$r" late)"
}
# col CONTENDER N: the median of column N of CONTENDER's runs.
col() { awk -v c="$1" -v n="$2" '$1 == c {print $n}' "$tmp/runs" | median; }
# share CONTENDER: the median of its runs' script runs per decision.
share() { awk -v c="$1" '$1 == c && $3 > 0 {print $4 / $3}' "$tmp/runs" | median; }

: > "$tmp/runs"
echo "== uptime at the start: $(uptime)"
echo "== $RATE decisions/s for $RATE_DURATION, $ROUNDS rounds"
for round in $(seq "$ROUNDS"); do
  echo "round $round"
  run check -keyspace "$KEYSPACE"
  run check-unbatched -keyspace "$KEYSPACE" -max-batch 1
  run reserve -mode reserve -keyspace "$KEYSPACE" -max-wait 1s
  run reserve-unbatched -mode reserve -keyspace "$KEYSPACE" -max-wait 1s -max-batch 1
  run reserve-queued -mode reserve -keyspace "$QUEUED_KEYSPACE" -max-wait 1h
  if [ -n "$BASELINE" ]; then
    run reserve@baseline -mode reserve -keyspace "$KEYSPACE" -max-wait 1s
    run reserve-queued@baseline -mode reserve -keyspace "$QUEUED_KEYSPACE" -max-wait 1h
  fi
done

echo "== medians of $ROUNDS rounds (uptime now: $(uptime))"
printf '%-24s %14s %14s %14s\n' contender "CPU ms/1000" "µs per run" "runs/decision"
for c in check check-unbatched reserve reserve-unbatched reserve-queued reserve@baseline reserve-queued@baseline; do
  awk -v c="$c" '$1 == c {n++} END {exit !n}' "$tmp/runs" || continue
  printf '%-24s %14.2f %14.2f %14.2f\n' "$c" "$(col "$c" 2)" "$(col "$c" 5)" "$(share "$c")"
done
awk -v r="$(col reserve 2)" -v q="$(col reserve-queued 2)" -v c="$(col check 2)" -v u="$(col check-unbatched 2)" -v ru="$(col reserve-unbatched 2)" \
  'BEGIN {printf "Redis CPU per decision: reserve/check %.2f, reserve-unbatched/check-unbatched %.2f, reserve-queued/check %.2f (target: reserve <= check)\n", r / c, ru / u, q / c}'
if [ -n "$BASELINE" ]; then
  awk -v r="$(col reserve 2)" -v q="$(col reserve-queued 2)" -v rb="$(col reserve@baseline 2)" -v qb="$(col reserve-queued@baseline 2)" \
    'BEGIN {printf "Redis CPU per reservation, this tree/baseline: reserve %.2f, reserve-queued %.2f\n", r / rb, q / qb}'
fi
