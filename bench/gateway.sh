#!/usr/bin/env bash
# bench/gateway.sh — what sluice gateway adds over calling the upstream
# directly, side by side with nginx in one run.
#
# Builds sluice, bench/upstream (a bare net/http server answering a small
# fixed JSON body) and bench/httplat, starts the upstream, and in front of
# it: nginx (limit_req per client IP, keepalive connections to the
# upstream), a gateway on the embedded store and a gateway on a
# redis-server started here — one rule matching every call, 1e9 calls a
# minute per client IP, so that every call is allowed and the whole
# decision path runs. For the deny path, a second nginx server and a
# second embedded gateway whose rule (1 call an hour per IP) denies every
# call. Then, alternating the targets every round so that drift on the
# machine hits all alike:
#
#   1. maximum throughput: wrk -t2 -c64 -d$DURATION, ROUNDS rounds. For
#      each target, the medians of: calls/s, the proxy's CPU per 1,000
#      calls (user+system of its processes, from /proc: nginx master and
#      workers, the sluice process), the upstream's CPU per 1,000 calls
#      and Redis's; each allowed path's calls/s as a share of direct, each
#      deny path's as a share of direct (a bare Go handler), and the
#      gateway's CPU per call as a multiple of nginx's;
#   2. latency at a fixed rate below saturation: bench/httplat (the
#      internal/bench/loadgen engine of `sluice bench`, plain GETs, latency from
#      the scheduled send time) at $RATE calls/s, each call from one of
#      $CLIENTS addresses (X-Forwarded-For; the gateways trust 127.0.0.1);
#      medians of p50/p90/p99/p99.9 and what each proxy adds.
#
#   bench/gateway.sh                          # 3 rounds, 10 s runs, 2000 calls/s
#   ROUNDS=5 DURATION=20s RATE=5000 bench/gateway.sh
#   PORT_BASE=31500 bench/gateway.sh          # ports 31500-31531 instead
#   BEFORE=/tmp/sluice-old bench/gateway.sh   # one more target, gw-before:
#                                             # that build as an embedded gateway
#                                             # (ports +4 and +14, 18003/19003)
#
# Needs go, wrk and curl; nginx is installed with apt-get (nginx-light)
# when missing and apt-get can, else skipped; without redis-server the
# Redis gateway is skipped. The load average (uptime) is printed before and
# after: on a busy machine the figures are not worth comparing. Uses
# 127.0.0.1 ports 18100 (upstream), 18000/19000 (embedded gateway, admin),
# 18001/19001 (Redis gateway, admin), 18002/19002 (denying gateway, admin),
# 18200/18201 (nginx allowing, denying), 18379 (redis), or from PORT_BASE. nginx runs in the
# foreground as a process of this script, from a config written to a
# temporary directory; a system nginx service is never touched. Kills only
# the processes it started.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
RATE=${RATE:-2000}
RATE_DURATION=${RATE_DURATION:-10s}
CLIENTS=${CLIENTS:-10000}
# PORT_BASE moves every port: the upstream at PORT_BASE+0, the gateways at
# +1..+3 (admin +11..+13), nginx at +21/+22, redis at +31.
if [ -n "${PORT_BASE:-}" ]; then
  UP=127.0.0.1:$PORT_BASE
  GWM=127.0.0.1:$((PORT_BASE + 1)) GWR=127.0.0.1:$((PORT_BASE + 2)) GWD=127.0.0.1:$((PORT_BASE + 3))
  ADM=$((PORT_BASE + 11)) ADR=$((PORT_BASE + 12)) ADD=$((PORT_BASE + 13))
  NGA=127.0.0.1:$((PORT_BASE + 21)) NGD=127.0.0.1:$((PORT_BASE + 22))
  REDIS_PORT=$((PORT_BASE + 31))
else
  UP=127.0.0.1:18100
  GWM=127.0.0.1:18000 GWR=127.0.0.1:18001 GWD=127.0.0.1:18002
  ADM=19000 ADR=19001 ADD=19002
  NGA=127.0.0.1:18200 NGD=127.0.0.1:18201
  REDIS_PORT=18379
fi
PATH_=/api/orders

cd "$(dirname "$0")/.."
. bench/lib.sh
need go wrk curl
no_sluice_env
nginx_bin=$(find_nginx || true)

start_tmp

echo "== build"
build_sluice
go build -o "$tmp/upstream" ./bench/upstream
go build -o "$tmp/httplat" ./bench/httplat
[ -n "$nginx_bin" ] && "$nginx_bin" -v 2>&1
echo "load: $(uptime)"

echo "== start"
rule() { # ID LIMIT WINDOW
  printf 'rules:\n  - id: %s\n    description: bench/gateway.sh\n    by: ip\n    limit: %s\n    window: %s\n' "$1" "$2" "$3"
}
rule bench-per-ip 1000000000 1m > "$tmp/rules.yaml"
rule bench-per-ip 1000000000 1m > "$tmp/rules-redis.yaml"
rule bench-deny 1 1h > "$tmp/rules-deny.yaml"
"$tmp/upstream" -listen "$UP" 2> "$tmp/upstream.log" &
pids+=($!)
upstream_pid=$!
common=(--upstream "http://$UP" --trusted-proxies 127.0.0.1 --log-level warn)
"$tmp/sluice" gateway --listen "$GWM" --admin-listen 127.0.0.1:$ADM --rules "$tmp/rules.yaml" "${common[@]}" 2> "$tmp/gw-embedded.log" &
pids+=($!)
declare -A procs # target → the proxy's PIDs ("nginx": found at each run)
procs[direct]=""
procs[gw-embedded]=$!
"$tmp/sluice" gateway --listen "$GWD" --admin-listen 127.0.0.1:$ADD --rules "$tmp/rules-deny.yaml" "${common[@]}" 2> "$tmp/gw-deny.log" &
pids+=($!)
procs[gw-deny]=$!
targets=("direct=http://$UP$PATH_")
deny_targets=()
if [ -n "$nginx_bin" ]; then
  # limit_req counts in milliseconds: two calls of one IP in the same
  # millisecond are over a rate without burst, so the allowing zone has a
  # burst that no run reaches (the rule of the gateways, 1e9 a minute, is
  # a bucket of that size too).
  mkdir -p "$tmp/nginx"
  cat > "$tmp/nginx.conf" <<NGINX
worker_processes $(getconf _NPROCESSORS_ONLN);
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  limit_req_zone \$binary_remote_addr zone=allow:10m rate=1000000r/s;
  limit_req_zone \$binary_remote_addr zone=deny:10m rate=1r/m;
  limit_req_status 429;
  upstream up {
    server $UP;
    keepalive 64;
  }
  server {
    listen $NGA;
    location / {
      limit_req zone=allow burst=1000000 nodelay;
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header X-Forwarded-Host \$host;
    }
  }
  server {
    listen $NGD;
    location / {
      limit_req zone=deny;
      proxy_pass http://up;
    }
  }
}
NGINX
  "$nginx_bin" -e "$tmp/nginx-error.log" -p "$tmp/nginx" -c "$tmp/nginx.conf" -g 'daemon off;' &
  pids+=($!)
  nginx_pid=$!
  procs[nginx]=nginx
  procs[nginx-deny]=nginx
  targets+=("nginx=http://$NGA$PATH_")
  deny_targets+=("nginx-deny=http://$NGD$PATH_")
else
  echo "gateway.sh: nginx not found and not installable: the nginx reference is skipped" >&2
fi
targets+=("gw-embedded=http://$GWM$PATH_")
deny_targets+=("gw-deny=http://$GWD$PATH_")
if [ -n "${BEFORE:-}" ]; then
  # Another build of sluice as one more embedded gateway, on the port
  # after the denying gateway's, so that a change is measured side by
  # side with the build it replaces.
  GWB=127.0.0.1:$(( ${GWD##*:} + 1 )) ADB=$((ADD + 1))
  "$BEFORE" gateway --listen "$GWB" --admin-listen 127.0.0.1:$ADB --rules "$tmp/rules.yaml" "${common[@]}" 2> "$tmp/gw-before.log" &
  pids+=($!)
  procs[gw-before]=$!
  targets+=("gw-before=http://$GWB$PATH_")
fi
redis_pid=
if command -v redis-server >/dev/null; then
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --hz 100 --daemonize no > "$tmp/redis.log" 2>&1 &
  pids+=($!)
  redis_pid=$!
  for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  "$tmp/sluice" gateway --listen "$GWR" --admin-listen 127.0.0.1:$ADR --rules "$tmp/rules-redis.yaml" \
    --redis "127.0.0.1:$REDIS_PORT" "${common[@]}" 2> "$tmp/gw-redis.log" &
  pids+=($!)
  procs[gw-redis]=$!
  targets+=("gw-redis=http://$GWR$PATH_")
else
  echo "gateway.sh: redis-server not found: the Redis gateway is skipped" >&2
fi

for t in "${targets[@]}"; do
  wait_up "${t#*=}"
  echo "${t%%=*}: $(curl -fsS -D - -o /dev/null "${t#*=}" | tr -d '\r' | grep -iE '^(HTTP|x-ratelimit-remaining|ratelimit-policy)' | tr '\n' ' ')"
done
for t in "${deny_targets[@]}"; do
  for _ in $(seq 100); do curl -sS -o /dev/null "${t#*=}" 2>/dev/null && break; sleep 0.1; done
  echo "${t%%=*}: $(curl -sS -D - -o /dev/null "${t#*=}" | tr -d '\r' | grep -iE '^(HTTP|retry-after)' | tr '\n' ' ')"
done

# pids_of TARGET: the PIDs whose CPU is the target's proxy's.
pids_of() {
  case ${procs[$1]} in
    nginx) echo "$nginx_pid $(pgrep -P "$nginx_pid" | tr '\n' ' ')" ;;
    *) echo "${procs[$1]}" ;;
  esac
}

echo "== wrk -t2 -c64 -d$DURATION, $ROUNDS rounds, ${targets[*]%%=*} ${deny_targets[*]%%=*} in turn"
declare -A rps pcpu ucpu rcpu
for round in $(seq "$ROUNDS"); do
  line="round $round:"
  for t in "${targets[@]}" "${deny_targets[@]}"; do
    name=${t%%=*} url=${t#*=}
    out="$tmp/wrk-$name-$round.txt"
    proxy=$(pids_of "$name")
    p0=$(cpu_ticks $proxy) u0=$(cpu_ticks "$upstream_pid") r0=$(cpu_ticks $redis_pid)
    wrk -t2 -c64 -d"$DURATION" "$url" > "$out" 2>&1
    p1=$(cpu_ticks $proxy) u1=$(cpu_ticks "$upstream_pid") r1=$(cpu_ticks $redis_pid)
    case $name in
      *deny) grep -q 'Non-2xx' "$out" || echo "gateway.sh: $name allowed calls" >&2 ;;
      *) if grep -qE 'Non-2xx|Socket errors' "$out"; then
           echo "gateway.sh: wrk against $name saw errors:" >&2
           grep -E 'Non-2xx|Socket errors' "$out" >&2
         fi ;;
    esac
    r=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$out")
    n=$(awk '/requests in/ {print $1}' "$out")
    rps[$name]="${rps[$name]:-} $r"
    pcpu[$name]="${pcpu[$name]:-} $(per1000 $((p1 - p0)) "$n")"
    ucpu[$name]="${ucpu[$name]:-} $(per1000 $((u1 - u0)) "$n")"
    rcpu[$name]="${rcpu[$name]:-} $(per1000 $((r1 - r0)) "$n")"
    line+=$(printf '  %s %d/s' "$name" "$r")
  done
  echo "$line"
done

med() { printf '%s\n' $1 | median; }
direct=$(med "${rps[direct]}")
nginx_cpu=
[ -n "$nginx_bin" ] && nginx_cpu=$(med "${pcpu[nginx]}")
echo
echo "medians of $ROUNDS rounds (CPU: ms of user+system time per 1,000 calls):"
echo
echo "| | calls/s | × direct | proxy CPU / 1,000 | × nginx CPU | upstream CPU / 1,000 | Redis CPU / 1,000 |"
echo "|---|---|---|---|---|---|---|"
for t in "${targets[@]}" "${deny_targets[@]}"; do
  name=${t%%=*}
  m=$(med "${rps[$name]}") pc=$(med "${pcpu[$name]}") uc=$(med "${ucpu[$name]}") rc=$(med "${rcpu[$name]}")
  xn=—
  [ -n "$nginx_cpu" ] && [ "$name" != direct ] && xn=$(awk -v a="$pc" -v b="$nginx_cpu" 'BEGIN {printf "%.2f", a/b}')
  [ "$name" = direct ] && pc=—
  case $name in gw-redis) ;; *) rc=— ;; esac
  case $name in *deny) uc=— ;; esac
  printf '| %s | %.0f | %.2f | %s | %s | %s | %s |\n' "$name" "$m" "$(awk -v a="$m" -v b="$direct" 'BEGIN {print a/b}')" "$pc" "$xn" "$uc" "$rc"
done
echo "(deny rows: every call answered 429 by the proxy; × direct is against the bare Go handler of the upstream)"

echo
echo "== fixed rate: httplat -rate $RATE -duration $RATE_DURATION -rounds $ROUNDS -clients $CLIENTS"
"$tmp/httplat" -rate "$RATE" -duration "$RATE_DURATION" -rounds "$ROUNDS" -clients "$CLIENTS" "${targets[@]}"
echo "load: $(uptime)"
