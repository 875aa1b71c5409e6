#!/usr/bin/env bash
# bench/grpc.sh — sluice's Envoy rate limit service (ShouldRateLimit over
# gRPC) against the floor of a gRPC call on the same server and machine.
#
# Builds sluice, starts `sluice serve` on loopback with the embedded store
# and one rule (1,000,000 calls a minute per client, so nearly every call
# is allowed and all of the decision path runs), then:
#   1. throughput: `sluice bench --grpc --concurrency 64`, ROUNDS rounds;
#   2. latency at a fixed RATE (default 10,000/s), alternating for ROUNDS
#      rounds ShouldRateLimit and grpc.health.v1.Health/Check on the same
#      server (`sluice bench --grpc --grpc-health`), the cheapest call a
#      gRPC server answers: what is left between the two is sluice's.
# Prints every round and the medians.
#
#   bench/grpc.sh                         # 3 rounds of 10 s
#   ROUNDS=5 RATE=5000 bench/grpc.sh
#   CLIENT=grpc-go bench/grpc.sh          # the load through grpc-go
#
# Needs go and curl. Uses ports 28080, 28081 (gRPC) and 29090 on
# 127.0.0.1. Kills only the processes it started.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
RATE=${RATE:-10000}
RATE_CONCURRENCY=${RATE_CONCURRENCY:-32}
CONNS=${CONNS:-1}
CLIENT=${CLIENT:-lean}
DATA=127.0.0.1:28080
GRPC=127.0.0.1:28081
ADMIN=127.0.0.1:29090

cd "$(dirname "$0")/.."
. bench/lib.sh
need go curl python3
build_here

echo "== start"
printf 'rules:\n  - id: bench-per-client\n    by: client\n    limit: 1000000\n    window: 1m\n' > "$tmp/rules.yaml"
"$tmp/sluice" serve --listen "$DATA" --grpc-listen "$GRPC" --admin-listen "$ADMIN" --rules "$tmp/rules.yaml" --log-level warn 2> "$tmp/sluice.log" &
pids+=($!)
wait_up "http://$DATA/readyz"


echo "== throughput: sluice bench --grpc --grpc-client $CLIENT --concurrency 64 --grpc-conns 4 --duration $DURATION, $ROUNDS rounds"
tp=()
for round in $(seq "$ROUNDS"); do
  "$tmp/sluice" bench --grpc --grpc-client "$CLIENT" --target "$GRPC" --concurrency 64 --grpc-conns 4 --duration "$DURATION" --json > "$tmp/tp-$round.json"
  read -r rps p50 p90 p99 p999 late <<< "$(fields "$tmp/tp-$round.json")"
  tp+=("$rps")
  printf 'round %d: %s decisions/s  p50 %s ms  p99 %s ms\n' "$round" "$rps" "$p50" "$p99"
done
printf 'median: %s decisions/s (target ≥ 22,000)\n' "$(printf '%s\n' "${tp[@]}" | median)"

echo "== fixed rate $RATE/s, --concurrency $RATE_CONCURRENCY --grpc-conns $CONNS, $DURATION, $ROUNDS rounds: ShouldRateLimit then Health/Check (ms, from the scheduled send time)"
r99=() h99=()
for round in $(seq "$ROUNDS"); do
  "$tmp/sluice" bench --grpc --grpc-client "$CLIENT" --target "$GRPC" --rate "$RATE" --concurrency "$RATE_CONCURRENCY" --grpc-conns "$CONNS" --duration "$DURATION" --json > "$tmp/rls-$round.json"
  "$tmp/sluice" bench --grpc --grpc-client "$CLIENT" --grpc-health --target "$GRPC" --rate "$RATE" --concurrency "$RATE_CONCURRENCY" --grpc-conns "$CONNS" --duration "$DURATION" --json > "$tmp/health-$round.json"
  read -r _ rp50 rp90 rp99 rp999 rlate <<< "$(fields "$tmp/rls-$round.json")"
  read -r _ hp50 hp90 hp99 hp999 hlate <<< "$(fields "$tmp/health-$round.json")"
  r99+=("$rp99") h99+=("$hp99")
  printf 'round %d: ShouldRateLimit p50 %s p90 %s p99 %s p99.9 %s (late %s) | Health/Check p50 %s p90 %s p99 %s p99.9 %s (late %s)\n' \
    "$round" "$rp50" "$rp90" "$rp99" "$rp999" "$rlate" "$hp50" "$hp90" "$hp99" "$hp999" "$hlate"
done
printf 'median p99 at %s/s: ShouldRateLimit %s ms, Health/Check %s ms (target: ShouldRateLimit < 1 ms)\n' "$RATE" \
  "$(printf '%s\n' "${r99[@]}" | median)" "$(printf '%s\n' "${h99[@]}" | median)"
echo "load: $(uptime)"
