#!/usr/bin/env bash
# bench/envoy-diff.sh — sluice beside envoyproxy/ratelimit: the same
# ShouldRateLimit sequences sent to both, every answer compared field by
# field (bench/envoydiff).
#
# PEER is an envoyproxy/ratelimit service binary you built yourself (its
# ./src/service_cmd); this script builds only sluice and the harness. It
# starts one redis-server, writes one runtime directory (envoydiff
# -write-config) and starts both services on them with the same
# envoyproxy/ratelimit environment (LIMIT_RESPONSE_HEADERS_ENABLED=true,
# so the headers are compared too), then runs bench/envoydiff against the
# two. Their Redis keys never overlap, so they share the Redis and not a
# counter.
#
#   PEER=/path/to/ratelimit bench/envoy-diff.sh            # every scenario
#   PEER=/path/to/ratelimit bench/envoy-diff.sh -v -only replaces
#   PEER=... ENV="LOCAL_CACHE_SIZE_IN_BYTES=1000000" bench/envoy-diff.sh
#
# ENV: more envoyproxy/ratelimit settings for both (space-separated
# NAME=value), as its integration tests vary them.
# Arguments go to envoydiff. Needs go, curl, redis-server, redis-cli. Uses
# free loopback ports; kills only the processes it started.
set -euo pipefail

: "${PEER:?set PEER to an envoyproxy/ratelimit service binary}"
cd "$(dirname "$0")/.."
. bench/lib.sh
need go curl redis-server redis-cli
no_sluice_env
start_tmp

go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/envoydiff" ./bench/envoydiff
"$tmp/envoydiff" -write-config "$tmp/runtime"

free_port
start_redis "$port"
declare -A grpc
for svc in peer sluice; do
  free_port; http=$port
  free_port; g=$port
  free_port; dbg=$port
  grpc[$svc]=127.0.0.1:$g
  bin=$PEER
  [ "$svc" = sluice ] && bin=$tmp/sluice
  env -i PATH="$PATH" HOME="${HOME:-/tmp}" USE_STATSD=false LOG_LEVEL=warn \
    REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" \
    RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_IGNOREDOTFILES=true \
    LIMIT_RESPONSE_HEADERS_ENABLED=true ${ENV:-} \
    HOST=127.0.0.1 PORT="$http" GRPC_HOST=127.0.0.1 GRPC_PORT="$g" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$dbg" \
    "$bin" $([ "$svc" = sluice ] && echo serve) > "$tmp/$svc.log" 2>&1 &
  pids+=($!)
  wait_up "http://127.0.0.1:$http/healthcheck"
done

echo "== envoyproxy/ratelimit ${grpc[peer]}, sluice ${grpc[sluice]}, redis 127.0.0.1:$redis_port; load: $(uptime)"
"$tmp/envoydiff" -a "${grpc[peer]}" -b "${grpc[sluice]}" "$@"
echo "load: $(uptime)"
