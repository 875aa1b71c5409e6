#!/usr/bin/env bash
# bench/redis.sh — what a decision costs Redis, by load: sluice's Redis path
# against the textbook token-bucket script (bench/redis/textbook.lua) and
# against a counter (one pipeline of INCRBY and EXPIRE per decision, as
# envoyproxy/ratelimit does), in Redis CPU per 1,000 decisions.
#
# Starts its own redis-server on a free loopback port (no persistence, hz
# 100: see docs/redis.md, "Operating Redis") and, for ROUNDS rounds,
# alternating so that drift on the machine hits every contender:
#   (a) saturation, N decisions over KEYSPACE keys, each from an empty
#       database:
#       textbook: SCRIPT LOAD, then
#         redis-benchmark -P 16 -c 50 -n 2000000 -r 1000000 \
#           EVALSHA <sha> 1 rl:__rand_int__ 100 10 1 <now>
#       sluice: bench/redis (limiter.Limiter over store/redis, one
#         token_bucket rule of 100 per 10 s per user, 256 concurrent
#         callers, random users of a 1M keyspace; take.lua by FCALL);
#       incr: bench/redis -mode incr (the same callers and users, one
#         INCRBY+EXPIRE pipeline per decision);
#   (b) fixed rates, RATE_DURATION each, latency counted from each call's
#       intended send time: 5,000/s (LOW_RATE) and half load: HALF_RATE, by
#       default half of the lower of sluice's and incr's median decisions/s
#       in (a) (so that neither contender runs past half its maximum;
#       half of sluice's maximum alone was 80 % of incr's, and more than
#       the load generator held on this machine), each
#       for sluice (FCALL), sluice with EVALSHA (-evalsha: the path of
#       servers before Redis 7), sluice with one script run in flight
#       (-batch-concurrency 1: calls coalesce while a run is out), sluice
#       with a flush delay (-flush-delay FLUSH_DELAY: a connection with a
#       reply out holds its next write up to that long for more commands)
#       incr (never a flush delay: envoyproxy/ratelimit's default,
#       REDIS_PIPELINE_WINDOW 0, writes every request's pipeline at once)
#       and floor (bench/redis -mode floor: one run per decision of a script
#       that reads TIME, GETs and SETs the key and decides nothing, the
#       least a script run per decision costs); FIXED names the ones to
#       run (default all). For each window in BATCH_WAITS (default none,
#       e.g. '250us 500us 1ms') also sluice-wait-<window>: sluice with
#       -batch-wait <window> (store/redis Config.BatchWait, sluice serve's
#       --redis-batch-wait: a call that would start a script run waits up
#       to that long for others to share it).
#       A run that fell short of its rate (below 95 % of it, or more than
#       1 % of calls sent over 1 ms late) is marked "not held";
#   (c) the latency of single decisions on an idle server: 20,000 Checks
#       one after another.
# Each run measures the server's CPU time (INFO cpu used_cpu_user +
# used_cpu_sys, before and after) and its socket reads (INFO stats
# total_reads_processed). Prints every run, then the medians per load:
# Redis CPU and reads per 1,000 decisions, p50 and p99, and the ratios the
# targets are about: sluice/incr CPU (≤ 0.8 at 5,000/s and half load; floor/incr
# is what one script run per decision costs at the least) and
# sluice/textbook decisions per Redis CPU-second at saturation (≥ 1.5).
#
#   bench/redis.sh                      # 3 rounds
#   ROUNDS=5 bench/redis.sh
#   N=1000000 RATE_DURATION=5s bench/redis.sh   # shorter
#   HZ=10 bench/redis.sh                # Redis's default hz, for comparison
#   HALF_RATE=30000 FLUSH_DELAY=100us bench/redis.sh
#   PORT=31602 bench/redis.sh           # this port, not a random free one
#   BENCH_ARGS='-batch-concurrency 2' bench/redis.sh   # more flags for sluice's runs
#   BATCH_WAITS='250us 500us 1ms' FIXED='sluice sluice-1-in-flight incr' bench/redis.sh
#   SATURATION=0 HALF_RATE=10000 bench/redis.sh   # fixed rates only (needs HALF_RATE)
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
LOW_RATE=${LOW_RATE:-5000}
HALF_RATE=${HALF_RATE:-}
FLUSH_DELAY=${FLUSH_DELAY:-200us}
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
FIXED=${FIXED:-sluice incr sluice-evalsha sluice-1-in-flight sluice-flush floor}
BATCH_WAITS=${BATCH_WAITS:-}
SATURATION=${SATURATION:-1}
if [ "$SATURATION" = 0 ] && [ -z "$HALF_RATE" ]; then
  echo "redis.sh: SATURATION=0 needs HALF_RATE (half load is otherwise half of the saturation rates)" >&2; exit 2
fi
waits=$(for w in $BATCH_WAITS; do printf 'sluice-wait-%s ' "$w"; done)

cd "$(dirname "$0")/.."
. bench/lib.sh
need go redis-server redis-cli redis-benchmark

start_tmp
free_port

echo "== build"
go build -o "$tmp/bench" ./bench/redis
redis-server --version

echo "== start redis-server on 127.0.0.1:$port"
start_redis "$port" --hz "$HZ" --latency-monitor-threshold 1

cpu() { cli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.3f", s}'; }

# textbook: one run of redis-benchmark; prints "decisions/s decisions-per-cpu-s
# cpu-s keys p50-ms p99-ms".
textbook() {
  cli flushall >/dev/null
  cli config resetstat >/dev/null
  local sha now c0 c1 out rps calls failed p50 p99
  sha=$(cli script load "$(cat bench/redis/textbook.lua)")
  now=$(date +%s)
  c0=$(cpu)
  out=$(redis-benchmark -h 127.0.0.1 -p "$port" -P 16 -c 50 -n "$N" -r "$KEYSPACE" --csv \
    EVALSHA "$sha" 1 rl:__rand_int__ 100 10 1 "$now")
  c1=$(cpu)
  rps=$(printf '%s\n' "$out" | awk -F'"' 'NR == 2 {print $4}')
  p50=$(printf '%s\n' "$out" | awk -F'"' 'NR == 2 {print $10}')
  p99=$(printf '%s\n' "$out" | awk -F'"' 'NR == 2 {print $14}')
  calls=$(cli info commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*failed_calls=\([0-9]*\).*/\1 \2/p')
  failed=${calls#* }
  if [ "${calls% *}" != "$N" ] || [ "$failed" != 0 ]; then
    echo "redis.sh: textbook: evalsha calls/failed = $calls, want $N/0" >&2; exit 1
  fi
  keys=$(cli dbsize)
  awk -v rps="$rps" -v n="$N" -v c0="$c0" -v c1="$c1" -v keys="$keys" -v p50="$p50" -v p99="$p99" \
    'BEGIN {printf "%.0f %.0f %.3f %d %s %s\n", rps, n / (c1 - c0), c1 - c0, keys, p50, p99}'
}

# bench ARGS...: one run of bench/redis from an empty database; prints its
# RESULT fields.
bench() {
  cli flushall >/dev/null
  cli config resetstat >/dev/null
  cli latency reset >/dev/null
  GOMAXPROCS="$ENGINE_PROCS" "$tmp/bench" -redis "127.0.0.1:$port" "$@" > "$tmp/bench.out"
  grep '^RESULT' "$tmp/bench.out" | sed 's/^RESULT //'
}
# shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
sluice() { bench "$@" $BENCH_ARGS; }
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# Every measurement is one line of $tmp/runs: load contender cpu_ms_per_1000
# p50_us p99_us decisions/s decisions-per-cpu-s decisions-per-run late
# reads_per_1000 held (1: a fixed rate held, or a closed loop; 0: not held)
record() { echo "$*" >> "$tmp/runs"; }
result() { # LOAD CONTENDER RESULT-FIELDS [RATE]
  local r=$3 rate=${4:-0} calls held
  calls=$(field "$r" calls)
  held=$(awk -v rate="$rate" -v got="$(field "$r" decisions_per_s)" -v late="$(field "$r" late)" -v n="$(field "$r" decisions)" \
    'BEGIN {print (rate == 0 || (got >= 0.95 * rate && late <= 0.01 * n)) ? 1 : 0}')
  record "$1" "$2" "$(field "$r" cpu_ms_per_1000)" "$(field "$r" p50_us)" "$(field "$r" p99_us)" \
    "$(field "$r" decisions_per_s)" "$(field "$r" decisions_per_cpu_s)" \
    "$(awk -v d="$(field "$r" decisions)" -v c="$calls" 'BEGIN {printf "%.2f", (c > 0 ? d / c : 0)}')" "$(field "$r" late)" \
    "$(field "$r" reads_per_1000)" "$held"
  printf '  %-10s %-16s %7.2f ms Redis CPU per 1,000 | p50 %9s µs  p99 %9s µs | %7s decisions/s | %s decisions per run | %s reads per 1,000 | %s late%s\n' \
    "$1" "$2" "$(field "$r" cpu_ms_per_1000)" "$(field "$r" p50_us)" "$(field "$r" p99_us)" "$(field "$r" decisions_per_s)" \
    "$(awk -v d="$(field "$r" decisions)" -v c="$calls" 'BEGIN {printf "%.2f", (c > 0 ? d / c : 0)}')" "$(field "$r" reads_per_1000)" \
    "$(field "$r" late)" "$([ "$held" = 1 ] || echo ' | rate NOT HELD')"
}
# col LOAD CONTENDER N: the median of column N of the runs of LOAD and CONTENDER.
col() { awk -v l="$1" -v c="$2" -v n="$3" '$1 == l && $2 == c {print $n}' "$tmp/runs" | median; }

: > "$tmp/runs"
echo "== uptime at the start: $(uptime)"
echo "== (a) saturation: $N decisions over $KEYSPACE keys, $ROUNDS rounds"
[ "$SATURATION" = 0 ] && echo "(skipped: SATURATION=0)"
for round in $(seq "$([ "$SATURATION" = 0 ] && echo 0 || echo "$ROUNDS")"); do
  echo "round $round"
  textbook > "$tmp/textbook.out"
  read -r trps tcpu tsec tkeys tp50 tp99 < "$tmp/textbook.out"
  record saturation textbook "$(awk -v s="$tsec" -v n="$N" 'BEGIN {printf "%.2f", s * 1e6 / n}')" \
    "$(awk -v x="$tp50" 'BEGIN {print x * 1000}')" "$(awk -v x="$tp99" 'BEGIN {print x * 1000}')" "$trps" "$tcpu" 1 0 - 1
  printf '  %-10s %-16s %7.2f ms Redis CPU per 1,000 | p50 %9s µs  p99 %9s µs | %7s decisions/s | (%d keys; redis-benchmark -P 16: latency of a pipeline)\n' \
    saturation textbook "$(awk -v s="$tsec" -v n="$N" 'BEGIN {print s * 1e6 / n}')" "$(awk -v x="$tp50" 'BEGIN {print x * 1000}')" \
    "$(awk -v x="$tp99" 'BEGIN {print x * 1000}')" "$trps" "$tkeys"
  result saturation sluice "$(sluice -duration 120s -requests "$N" -concurrency "$CONCURRENCY" -keyspace "$KEYSPACE")"
  result saturation incr "$(bench -mode incr -duration 120s -requests "$N" -concurrency "$CONCURRENCY" -keyspace "$KEYSPACE")"
done
if [ -n "$HALF_RATE" ]; then
  half=$HALF_RATE why="HALF_RATE"
else
  max=$(col saturation sluice 6)
  imax=$(col saturation incr 6)
  half=$(awk -v a="$max" -v b="$imax" 'BEGIN {printf "%.0f", (a < b ? a : b) / 2}')
  why="half of the lower of sluice's median $max/s and incr's $imax/s"
fi

echo "== (b) fixed rates: $LOW_RATE/s and $half/s ($why), $RATE_DURATION each, $ROUNDS rounds"
for round in $(seq "$ROUNDS"); do
  echo "round $round"
  for rate in "$LOW_RATE" "$half"; do
    load=$([ "$rate" = "$LOW_RATE" ] && echo low || echo half)
    for c in $FIXED $waits; do
      case $c in
      sluice) flags=(sluice) ;;
      incr) flags=(bench -mode incr) ;;
      sluice-evalsha) flags=(sluice -evalsha) ;;
      sluice-1-in-flight) flags=(sluice -batch-concurrency 1) ;;
      sluice-flush) flags=(sluice -flush-delay "$FLUSH_DELAY") ;;
      floor) flags=(bench -mode floor) ;;
      sluice-wait-*) flags=(sluice -batch-wait "${c#sluice-wait-}") ;;
      *) echo "redis.sh: FIXED: no contender $c" >&2; exit 2 ;;
      esac
      result "$load" "$c" "$("${flags[@]}" -duration "$RATE_DURATION" -rate "$rate" -concurrency "$CONCURRENCY" -keyspace "$KEYSPACE")" "$rate"
    done
  done
done
# Redis's own stalls during the last half-load run (LATENCY LATEST: event, time, latest ms, max ms).
echo "Redis events over 1 ms during the last run, max ms: $(cli latency latest | paste -d' ' - - - - | awk '{printf "%s %s; ", $1, $4}')"

echo "== (c) single decisions on an idle server: $SEQ_CALLS sequential Checks"
sluice -duration 120s -requests "$SEQ_CALLS" -concurrency 1 -keyspace "$KEYSPACE" > /dev/null
sed -n '1,/^RESULT/p' "$tmp/bench.out" | grep -v '^RESULT'

echo "== medians of $ROUNDS rounds (uptime now: $(uptime))"
# held LOAD CONTENDER: how many of its runs held their rate, of how many.
held() { awk -v l="$1" -v c="$2" '$1 == l && $2 == c {n++; h += $11} END {printf "%d/%d", h, n}' "$tmp/runs"; }
printf '%-10s %-18s %12s %10s %10s %12s %10s %10s %6s\n' load contender "CPU ms/1000" "p50 µs" "p99 µs" decisions/s "per run" "reads/1000" held
for load in low half saturation; do
  for c in sluice sluice-evalsha sluice-1-in-flight $waits sluice-flush floor incr textbook; do
    awk -v l="$load" -v c="$c" '$1 == l && $2 == c {n++} END {exit !n}' "$tmp/runs" || continue
    printf '%-10s %-18s %12.2f %10.1f %10.1f %12.0f %10.2f %10s %6s\n' "$load" "$c" "$(col "$load" "$c" 3)" "$(col "$load" "$c" 4)" \
      "$(col "$load" "$c" 5)" "$(col "$load" "$c" 6)" "$(col "$load" "$c" 8)" "$([ "$c" = textbook ] && echo - || col "$load" "$c" 10)" "$(held "$load" "$c")"
  done
done
# ratio LOAD A B COLUMN: the median over rounds of A's column ÷ B's in the
# same round (the runs of one round are minutes apart, the rounds are not).
ratio() {
  awk -v l="$1" -v a="$2" -v b="$3" -v n="$4" '$1 == l && $2 == a {x[++i] = $n} $1 == l && $2 == b {y[++j] = $n}
    END {for (k = 1; k <= i && k <= j; k++) if (y[k] > 0) print x[k] / y[k]}' "$tmp/runs" | median
}
for load in low half; do
  awk -v l="$load" -v s="$(ratio "$load" sluice incr 3)" -v f="$(ratio "$load" sluice-flush incr 3)" -v o="$(ratio "$load" sluice-1-in-flight incr 3)" \
    -v e="$(ratio "$load" sluice sluice-evalsha 3)" -v ps="$(ratio "$load" sluice incr 5)" -v pf="$(ratio "$load" sluice-flush incr 5)" \
    -v fl="$(ratio "$load" floor incr 3)" -v sf="$(ratio "$load" sluice floor 3)" \
    -v hs="$(held "$load" sluice)" -v hi="$(held "$load" incr)" \
    'BEGIN {printf "%s (median of per-round ratios; rate held sluice %s, incr %s): Redis CPU per decision sluice/incr %.2f (target <= 0.8: %s), floor/incr %.2f, sluice/floor %.2f, flush delay/incr %.2f, one in flight/incr %.2f, FCALL/EVALSHA %.2f; p99 sluice/incr %.2f, flush delay/incr %.2f\n",
      l, hs, hi, s, (s <= 0.8 ? "met" : "NOT met"), fl, sf, f, o, e, ps, pf}'
done
for load in low half; do
  for c in sluice-1-in-flight $waits; do
    awk -v l="$load" -v c="$c" -v ci="$(ratio "$load" "$c" incr 3)" -v cs="$(ratio "$load" "$c" sluice 3)" \
      -v pi="$(ratio "$load" "$c" incr 5)" -v ps="$(ratio "$load" "$c" sluice 5)" -v h="$(held "$load" "$c")" \
      'BEGIN {if (h !~ /\/0$/) printf "%s %s (median of per-round ratios; rate held %s): Redis CPU per decision ÷ incr %s, ÷ sluice %s; p99 ÷ incr %s, ÷ sluice %s\n", l, c, h, ci, cs, pi, ps}'
  done
done
[ "$SATURATION" = 0 ] && exit 0
awk -v s="$(col saturation sluice 7)" -v t="$(col saturation textbook 7)" -v i="$(col saturation incr 3)" -v c="$(col saturation sluice 3)" \
  'BEGIN {printf "saturation: decisions per Redis CPU-second sluice/textbook %.2f (target >= 1.5: %s); Redis CPU per decision sluice/incr %.2f\n", s / t, (s / t >= 1.5 ? "met" : "NOT met"), c / i}'
