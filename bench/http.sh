#!/usr/bin/env bash
# bench/http.sh — sluice's decision API against a bare net/http handler.
#
# Builds sluice and bench/baseline, starts both on loopback, installs one
# rule in sluice through the admin API (1,000,000 calls a minute per client,
# so nearly every call is allowed and all of the decision path runs), then
# runs wrk with 64 keep-alive connections against each, alternating
# sluice/baseline for ROUNDS rounds so that drift on the machine hits both
# alike. Prints every round, the median of each and the ratio (the target:
# sluice ≥ 0.75 × baseline), then the latency percentiles of fixed-rate
# runs of `sluice bench` (coordinated-omission-free), again alternating
# sluice/baseline for ROUNDS rounds, and the median p99 of each.
# With BEFORE, another build of sluice is one more target ("before"),
# measured in the same rounds, sluice and before taking turns going first;
# the throughput rounds then also print each sluice process's CPU per
# 1,000 calls (user+system, from /proc) and the medians new/before.
#
#   bench/http.sh                         # 3 rounds of 10 s
#   ROUNDS=5 DURATION=20s bench/http.sh
#   RATE=20000 bench/http.sh              # fixed rate of the latency run
#   BEFORE=/tmp/sluice-old bench/http.sh  # and that build, side by side
#                                         # (ports 18081, 19091)
#
# Needs go, wrk and curl. Uses ports 18080, 19090 (sluice) and 18090
# (baseline) on 127.0.0.1 (its gRPC listener is off: --grpc-listen ""), so
# it runs beside a default `sluice serve`. Kills only the processes it started.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
RATE=${RATE:-10000}
RATE_DURATION=${RATE_DURATION:-10s}
RATE_CONCURRENCY=${RATE_CONCURRENCY:-16}
DATA=127.0.0.1:18080
ADMIN=127.0.0.1:19090
BASE=127.0.0.1:18090
BDATA=127.0.0.1:18081
BADMIN=127.0.0.1:19091

cd "$(dirname "$0")/.."
. bench/lib.sh
need go wrk curl python3
no_sluice_env

start_tmp

echo "== build"
build_sluice
[ -z "${BEFORE:-}" ] || echo "before: $BEFORE ($("$BEFORE" version | head -1))"
echo "load: $(uptime)"
go build -o "$tmp/baseline" ./bench/baseline

echo "== start"
printf 'rules: []\n' > "$tmp/rules.yaml"
"$tmp/sluice" serve --listen "$DATA" --admin-listen "$ADMIN" --grpc-listen "" --rules "$tmp/rules.yaml" --log-level warn 2> "$tmp/sluice.log" &
pids+=($!)
spid=$!
if [ -n "${BEFORE:-}" ]; then
  "$BEFORE" serve --listen "$BDATA" --admin-listen "$BADMIN" --grpc-listen "" --rules "$tmp/rules.yaml" --log-level warn 2> "$tmp/before.log" &
  pids+=($!)
  bpid=$!
fi
"$tmp/baseline" -listen "$BASE" 2> "$tmp/baseline.log" &
pids+=($!)

wait_up "http://$DATA/readyz"
wait_up "http://$ADMIN/rules"
if [ -n "${BEFORE:-}" ]; then
  wait_up "http://$BDATA/readyz"
  wait_up "http://$BADMIN/rules"
fi

cat > "$tmp/bench-rule.yaml" <<'YAML'
rules:
  - id: bench-per-client
    description: bench/http.sh, nearly every call allowed
    by: client
    limit: 1000000
    window: 1m
YAML
"$tmp/sluice" rules apply -f "$tmp/bench-rule.yaml" --admin "http://$ADMIN"
[ -z "${BEFORE:-}" ] || "$BEFORE" rules apply -f "$tmp/bench-rule.yaml" --admin "http://$BADMIN"

body='{"user":"u42","endpoint":"GET /api/orders"}'
for target in "$DATA" ${BEFORE:+"$BDATA"} "$BASE"; do
  answer=$(curl -fsS -X POST -H 'Content-Type: application/json' -d "$body" "http://$target/ratelimit/check") || {
    echo "http.sh: POST http://$target/ratelimit/check failed" >&2; exit 1; }
  echo "$target → $answer"
done

# run_wrk NAME ADDR: one wrk run; prints its requests/s, keeps its output.
run_wrk() {
  local out="$tmp/wrk-$1-$round.txt"
  wrk -t2 -c64 -d"$DURATION" -s bench/check.lua "http://$2" > "$out" 2>&1
  if grep -qE 'Non-2xx|Socket errors' "$out"; then
    echo "http.sh: wrk against $1 saw errors:" >&2
    grep -E 'Non-2xx|Socket errors' "$out" >&2
  fi
  awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$out"
}

# run_cpu NAME ADDR PID: run_wrk, then the PID's CPU per 1,000 calls of it.
run_cpu() {
  local t0 t1
  t0=$(cpu_ticks "$3")
  r=$(run_wrk "$1" "$2")
  t1=$(cpu_ticks "$3")
  c=$(per1000 $((t1 - t0)) "$(awk '/requests in/ {print $1}' "$tmp/wrk-$1-$round.txt")")
}


echo "== wrk -t2 -c64 -d$DURATION, $ROUNDS rounds, sluice${BEFORE:+ and before in turn,} then baseline (CPU: ms per 1,000 calls)"
sl=() bl=() sc=() fl=() fc=()
for round in $(seq "$ROUNDS"); do
  if [ -n "${BEFORE:-}" ] && [ $((round % 2)) = 0 ]; then
    run_cpu before "$BDATA" "$bpid"; f=$r fcpu=$c
  fi
  run_cpu sluice "$DATA" "$spid"; s=$r scpu=$c
  if [ -n "${BEFORE:-}" ] && [ $((round % 2)) = 1 ]; then
    run_cpu before "$BDATA" "$bpid"; f=$r fcpu=$c
  fi
  b=$(run_wrk baseline "$BASE")
  sl+=("$s") bl+=("$b") sc+=("$scpu")
  printf 'round %d: sluice %8d decisions/s (CPU %s)   baseline %8d req/s   ratio %.3f' "$round" "$s" "$scpu" "$b" "$(awk -v s="$s" -v b="$b" 'BEGIN {print s/b}')"
  if [ -n "${BEFORE:-}" ]; then
    fl+=("$f") fc+=("$fcpu")
    printf '   before %8d decisions/s (CPU %s)' "$f" "$fcpu"
  fi
  printf '   load %s\n' "$(cut -d' ' -f1 /proc/loadavg)"
done
ms=$(printf '%s\n' "${sl[@]}" | median)
mb=$(printf '%s\n' "${bl[@]}" | median)
ratio=$(awk -v s="$ms" -v b="$mb" 'BEGIN {printf "%.3f", s/b}')
verdict=$(awk -v r="$ratio" 'BEGIN {print (r >= 0.75 ? "meets" : "is below")}')
printf 'median: sluice %.0f decisions/s, baseline %.0f req/s, ratio %s (%s the 0.75 target)\n' "$ms" "$mb" "$ratio" "$verdict"
printf 'median sluice CPU: %s ms per 1,000 calls\n' "$(printf '%s\n' "${sc[@]}" | median)"
if [ -n "${BEFORE:-}" ]; then
  mf=$(printf '%s\n' "${fl[@]}" | median) mfc=$(printf '%s\n' "${fc[@]}" | median) msc=$(printf '%s\n' "${sc[@]}" | median)
  printf 'median before: %.0f decisions/s, CPU %s ms per 1,000 calls; sluice/before: calls/s %.3f, CPU %.3f\n' "$mf" "$mfc" \
    "$(awk -v a="$ms" -v b="$mf" 'BEGIN {print a/b}')" "$(awk -v a="$msc" -v b="$mfc" 'BEGIN {print (b > 0 ? a/b : 0)}')"
fi
echo "sluice latency (wrk, last round):"
grep -A2 'Thread Stats' "$tmp/wrk-sluice-$ROUNDS.txt" | tail -2

run_rate() { # NAME ADDR: the fields of one fixed-rate run
  "$tmp/sluice" bench --target "http://$2" --rate "$RATE" --duration "$RATE_DURATION" --concurrency "$RATE_CONCURRENCY" --json > "$tmp/rate-$1-$round.json"
  fields "$tmp/rate-$1-$round.json"
}

echo "== sluice bench --rate $RATE --duration $RATE_DURATION --concurrency $RATE_CONCURRENCY, $ROUNDS rounds, sluice${BEFORE:+, before} then baseline (latency from the scheduled send time, ms)"
s99=() b99=() f99=()
for round in $(seq "$ROUNDS"); do
  read -r _ sp50 sp90 sp99 sp999 slate <<< "$(run_rate sluice "$DATA")"
  [ -z "${BEFORE:-}" ] || read -r _ fp50 fp90 fp99 fp999 flate <<< "$(run_rate before "$BDATA")"
  read -r _ bp50 bp90 bp99 bp999 blate <<< "$(run_rate baseline "$BASE")"
  s99+=("$sp99") b99+=("$bp99")
  printf 'round %d: sluice p50 %s p90 %s p99 %s p99.9 %s (late %s) | baseline p50 %s p90 %s p99 %s p99.9 %s (late %s)\n' \
    "$round" "$sp50" "$sp90" "$sp99" "$sp999" "$slate" "$bp50" "$bp90" "$bp99" "$bp999" "$blate"
  if [ -n "${BEFORE:-}" ]; then
    f99+=("$fp99")
    printf '         before p50 %s p90 %s p99 %s p99.9 %s (late %s)\n' "$fp50" "$fp90" "$fp99" "$fp999" "$flate"
  fi
done
printf 'median p99 at %s/s: sluice %s ms, baseline %s ms (target: sluice < 1 ms)\n' "$RATE" \
  "$(printf '%s\n' "${s99[@]}" | median)" "$(printf '%s\n' "${b99[@]}" | median)"
[ -z "${BEFORE:-}" ] || printf 'median p99 at %s/s: before %s ms\n' "$RATE" "$(printf '%s\n' "${f99[@]}" | median)"
echo "load: $(uptime)"
