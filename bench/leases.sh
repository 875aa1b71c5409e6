#!/usr/bin/env bash
# bench/leases.sh — leases for hot buckets against no leases and against
# the counter, on the Zipf workload of issue 33: KEYSPACE callers (default
# 1,000,000) picked by a Zipf law of exponent ZIPF (default 1.1: a few
# heavy callers), each call checked against a per-caller rule (token
# bucket, 100 per 10 s) and a global rule (GLOBAL calls a second, default
# 100,000). Contenders, in ROUNDS alternating rounds (default 3) of
# DURATION each (default 5s), each from an empty database:
#   leases:   bench/redis (limiter over store/redis, leases on: the default)
#   noleases: the same with -leases=false (one script run per call)
#   unbatched: leases on, -max-batch 1: every call that goes to Redis is
#             a script run of its own, as on a Redis Cluster (which never
#             batches calls: their clients' keys live in different slots)
#   incr:     bench/redis -mode incr -global: one pipeline of INCRBY+EXPIRE
#             on the caller's key and on the global key per decision, as
#             envoyproxy/ratelimit does for two descriptors
#   textbook: bench/redis -mode textbook -global: the textbook script
#             (bench/redis/textbook.lua, EVALSHA) on the caller's key and on
#             the global key, one pipeline per decision
#   pinned:   leases on, the per-caller rule pinned lease: on (-pin); its
#             buckets are still not leased (their leases would be under 8
#             tokens): commit 8f3fde6 leased them, see the journal
#             docs/runs/2026-12-07-leases.md
#   pinned1s: the same with leases of up to 1 s (-lease-ttl 1s)
#   window:   leases on, with a coalescing window of WINDOW (default
#             500us; store/redis Config.BatchWait): the call that would
#             start a script run waits that long for others to share it
#   window:D  the same with a window of D (a Go duration: window:2ms)
#   serial:   leases on, one script run in flight (-batch-concurrency 1):
#             calls made while a run is out wait for it and share the next
#   nofill:   leases on, -batch-fill 1: a call goes at once while fewer
#             than four runs are out (the default before group commit)
# With HOT=1 the per-caller rule is left out (-caller=false): every call
# is checked against the global rule alone, hot-key traffic only.
# With RATE set (decisions/s), every contender is offered that fixed rate
# (-rate) instead of a closed loop: the same calls for each, whatever its
# speed. In a closed loop each contender runs at its own saturation, and
# a faster one sends more of the heavy callers' calls, which its local
# denials answer: its Redis CPU per decision falls with its speed.
# Prints per run the RESULT line, then per contender the medians of Redis
# CPU per 1,000 decisions (INFO cpu), decisions/s and p99, then each
# round's ratio to the counter and to the textbook script and the median
# of those ratios (what docs/redis.md's table gives). cpu_ms_per_1000
# is read by the bench around its load; all_ms_per_1000 by this script
# around the whole bench process, so that it also holds what the bench
# does after its load: the give-back of every lease in hand at Close.
#
#   bench/leases.sh                      # defaults
#   ROUNDS=5 DURATION=10s bench/leases.sh
#   CONTENDERS='leases incr' bench/leases.sh   # some of them only
#   HOT=1 bench/leases.sh                # the global rule alone
#   RATE=50000 bench/leases.sh           # every contender at 50,000 decisions/s
#   RATE=50000 CONTENDERS='leases serial window:1ms incr' bench/leases.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-5s} KEYSPACE=${KEYSPACE:-1000000}
ZIPF=${ZIPF:-1.1} GLOBAL=${GLOBAL:-100000} CONCURRENCY=${CONCURRENCY:-64} HOT=${HOT:-0} RATE=${RATE:-0} WINDOW=${WINDOW:-500us}
bin=$(mktemp -d)
trap 'kill "$rpid" 2>/dev/null || true; rm -rf "$bin"' EXIT
go build -o "$bin/redis-bench" ./bench/redis
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --hz 100 --daemonize no --logfile "$bin/redis.log" &
rpid=$!
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
cpu() { redis-cli -p "$port" info cpu | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f", s}'; }
run() { # name, args...
  local name=$1; shift
  redis-cli -p "$port" flushall >/dev/null
  local c0 line
  c0=$(cpu)
  line=$("$bin/redis-bench" -redis "127.0.0.1:$port" -duration "$DURATION" -concurrency "$CONCURRENCY" \
    -keyspace "$KEYSPACE" -zipf "$ZIPF" -global "$GLOBAL" -rate "$RATE" -caller="$([ "$HOT" = 1 ] && echo false || echo true)" "$@" | grep '^RESULT')
  python3 -c 'import sys; c0, c1, l = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]; n = int(l.split("decisions=")[1].split()[0]); print(l.replace("RESULT", "RESULT contender=" + sys.argv[4], 1) + " all_ms_per_1000=%.2f" % ((c1 - c0) * 1e6 / max(n, 1)))' "$c0" "$(cpu)" "$line" "$name"
}
out=$bin/results
CONTENDERS=${CONTENDERS:-leases noleases unbatched incr textbook}
for r in $(seq "$ROUNDS"); do
  for c in $CONTENDERS; do
    case $c in
      leases) run leases ;;
      noleases) run noleases -leases=false ;;
      unbatched) run unbatched -max-batch 1 ;;
      incr) run incr -mode incr ;;
      textbook) run textbook -mode textbook ;;
      pinned) run pinned -pin ;;
      pinned1s) run pinned1s -pin -lease-ttl 1s ;;
      window) run window -batch-wait "$WINDOW" ;;
      window:*) run "$c" -batch-wait "${c#window:}" ;;
      serial) run serial -batch-concurrency 1 ;;
      nofill) run nofill -batch-fill 1 ;;
      *) echo "leases.sh: unknown contender $c" >&2; exit 2 ;;
    esac >>"$out"
  done
done
cat "$out"
for c in $CONTENDERS; do
  python3 - "$out" "$c" <<'PY'
import sys, statistics
rows = [dict(kv.split('=', 1) for kv in l.split()[1:]) for l in open(sys.argv[1]) if f"contender={sys.argv[2]} " in l]
med = lambda k: statistics.median(float(r[k]) for r in rows)
print(f"{sys.argv[2]}: median of {len(rows)}: cpu_ms_per_1000={med('cpu_ms_per_1000'):.2f} all_ms_per_1000={med('all_ms_per_1000'):.2f} decisions_per_s={med('decisions_per_s'):.0f} p50_us={med('p50_us'):.1f} p99_us={med('p99_us'):.1f}")
PY
done
# Each round's ratio to the counter and to the textbook script (when they
# ran), and the median of those ratios: the figures docs/redis.md gives.
python3 - "$out" <<'PY'
import sys, statistics
rows = [dict(kv.split('=', 1) for kv in l.split()[1:]) for l in open(sys.argv[1]) if l.startswith('RESULT')]
by = {}
for r in rows:
    by.setdefault(r['contender'], []).append(float(r['cpu_ms_per_1000']))
for base in ('incr', 'textbook'):
    if base not in by:
        continue
    for c, v in by.items():
        if c == base:
            continue
        ratios = [a / b for a, b in zip(v, by[base])]
        print(f"{c} / {base}: rounds {' '.join(f'{x:.3f}' for x in ratios)} median {statistics.median(ratios):.3f}")
PY
