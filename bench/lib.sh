# bench/lib.sh — what the bench scripts share; sourced, not run.
#
#   need TOOL...      exit with a message unless every TOOL is on PATH
#   no_sluice_env     unset every SLUICE_* variable (the sluice processes a
#                     script starts read them)
#   start_tmp         make $tmp and arrange, on exit, to kill the processes
#                     whose PIDs the script added to pids, then remove $tmp
#   wait_up URL       wait up to 10 s for URL to answer 2xx, else print the
#                     logs in $tmp and exit
#   median            the median of the numbers on stdin, one per line
#   build_sluice      build ./cmd/sluice into $tmp/sluice, stamped with the
#                     commit, and print its version
#   fields FILE       "decisions/s p50 p90 p99 p99.9 late" (ms) of a
#                     `sluice bench --json` report (needs python3)
#   find_nginx        print the path of nginx; when there is none, install
#                     nginx-light with apt-get (as root, without starting
#                     its service) and print that; fails when neither works
#   free_port         set port to $PORT when it is set, else to a loopback
#                     port nothing answers on; exit with a message if none
#                     is found
#   start_redis PORT [ARG...]
#                     start redis-server on 127.0.0.1:PORT with ARGs added (no
#                     persistence, its files in $tmp, its log $tmp/redis.log),
#                     add its PID to pids, define cli (redis-cli to it) and
#                     wait up to 10 s for it to answer, else print the log and
#                     exit
#   cpu_ticks PID...  user+system CPU of the PIDs so far, in clock ticks
#                     (from /proc; a PID that is gone counts 0)
#   per1000 TICKS N   TICKS as milliseconds per 1,000 of N calls
#
# The messages name the script ($0).

me=$(basename "$0")

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "$me: $tool is required" >&2; exit 1; }
  done
}

no_sluice_env() {
  local v
  while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(SLUICE_[A-Za-z0-9_]*\)=.*/\1/p')
}

pids=()
start_tmp() {
  tmp=$(mktemp -d)
  trap _cleanup EXIT INT TERM
}
_cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}

wait_up() { # URL
  for _ in $(seq 100); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$me: $1 did not come up; logs:" >&2
  cat "$tmp"/*.log >&2
  exit 1
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

build_sluice() {
  local commit
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  go build -ldflags "-X github.com/sluicehq/sluice/internal/cli.commit=$commit" -o "$tmp/sluice" ./cmd/sluice
  "$tmp/sluice" version | head -1
}

# build_here: no SLUICE_* settings, a temporary folder, the sluice binary
# built in it, and the load average it was built under.
build_here() {
  no_sluice_env
  start_tmp
  echo "== build"
  build_sluice
  echo "load: $(uptime)"
}

fields() { # FILE
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); l=r["latency_ms"]; print("%.0f %.3f %.3f %.3f %.3f %d" % (r["decisions_per_sec"], l["p50"], l["p90"], l["p99"], l["p999"], r.get("late", 0)))' "$1"
}

find_nginx() {
  local p
  for p in "$(command -v nginx 2>/dev/null)" /usr/sbin/nginx; do
    [ -n "$p" ] && [ -x "$p" ] && { echo "$p"; return 0; }
  done
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 1
  echo "$me: installing nginx-light with apt-get" >&2
  # policy-rc.d answering 101 keeps the package's service from starting
  # (Docker images have one already; it is left as it was found).
  local rcd=/usr/sbin/policy-rc.d made=
  if [ ! -e "$rcd" ]; then printf '#!/bin/sh\nexit 101\n' > "$rcd" && chmod +x "$rcd" && made=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >&2 || { [ -n "$made" ] && rm -f "$rcd"; return 1; }
  [ -n "$made" ] && rm -f "$rcd"
  [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx
}

free_port() {
  local p
  port=${PORT:-}
  for _ in $([ -n "$port" ] || seq 50); do
    p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
  done
  [ -n "$port" ] || { echo "$me: no free port" >&2; exit 1; }
}

redis_port=
cli() { redis-cli -h 127.0.0.1 -p "$redis_port" "$@"; }
start_redis() { # PORT [ARG...]
  redis_port=$1
  shift
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
    "$@" --logfile "$tmp/redis.log" --daemonize no &
  pids+=($!)
  for _ in $(seq 100); do
    [ "$(cli ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.1
  done
  echo "$me: redis-server did not start" >&2
  cat "$tmp/redis.log" >&2
  exit 1
}

cpu_ticks() { # PID...
  local p t=0 f
  for p in "$@"; do
    f=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) || f=0
    t=$((t + ${f:-0}))
  done
  echo "$t"
}

per1000() { # TICKS N
  awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN {if (n > 0) printf "%.1f", t * 1000 / hz / (n / 1000); else print 0}'
}
