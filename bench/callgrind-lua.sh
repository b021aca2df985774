#!/usr/bin/env bash
# The Lua engine's instructions per call, counted by valgrind's callgrind
# (repeatable where timings on a shared machine are not): each command of
# the FUNCTION library (lua/ratelimit.lua) through FCALL beside the recipe
# of the same algorithm (bench/lua/*.lua) through EVALSHA, and, when
# `make bench` has written it, go-redis/redis_rate's allowN script
# (build/redis_rate_allown.lua, as that library sends it).
#
# A plain redis-server (Debian's, no module) runs under callgrind, takes N
# calls on keys among 1,000 (so most calls find their key, the steady
# state), then 2N on a fresh server: instructions per call = (T(2N) -
# T(N)) / N, which leaves out start-up, loading and shutdown. redis-benchmark
# sends one call at a time (-c 1), so each figure includes the protocol's
# work (a PING costs about 3,800).
#
# Usage: bench/callgrind-lua.sh [N]   (make callgrind-lua; N defaults to 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for bin in valgrind redis-server redis-benchmark redis-cli; do
  command -v "$bin" >/dev/null || { echo "callgrind-lua: $bin not found" >&2; exit 1; }
done

free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}

# run COUNT SCRIPT CMD...: a server's total instructions serving COUNT of
# CMD, with the library and SCRIPT (a file, or -) loaded.
run() {
  local count=$1 script=$2
  shift 2
  local port out=$work/callgrind.out
  port=$(free_port)
  rm -f "$out"
  valgrind --tool=callgrind --callgrind-out-file="$out" redis-server --port "$port" --bind 127.0.0.1 \
    --save '' --appendonly no --hz 1 --set-proc-title no >"$work/server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do
    redis-cli -p "$port" PING >/dev/null 2>&1 && break
    sleep 0.1
  done
  redis-cli -p "$port" FUNCTION LOAD REPLACE "$(cat lua/ratelimit.lua)" >/dev/null
  if [ "$script" != - ]; then redis-cli -p "$port" SCRIPT LOAD "$(cat "$script")" >/dev/null; fi
  redis-benchmark -p "$port" -c 1 -n "$count" -r 1000 -q "$@" >/dev/null
  redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$pid" || true
  awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

# per NAME SCRIPT CMD...: instructions per call of CMD.
per() {
  local name=$1 script=$2
  shift 2
  local a b
  a=$(run "$n" "$script" "$@")
  b=$(run $((2 * n)) "$script" "$@")
  echo "$name: $(((b - a) / n)) instructions per call (N = $n, keys among 1,000)"
}

# sha is the SHA1 EVALSHA names a file's script by, as redis-cli sends it
# (without its last newline).
sha() { printf '%s' "$(cat "$1")" | sha1sum | cut -c1-40; }

k=k:__rand_int__
per "PING" - PING
per "FCALL gcra_throttle 1000 1000 1" - FCALL gcra_throttle 1 $k 1000 1000 1
per "recipe gcra.lua" bench/lua/gcra.lua EVALSHA "$(sha bench/lua/gcra.lua)" 1 $k 1000 1000 1
if [ -f build/redis_rate_allown.lua ]; then
  per "redis_rate allowN" build/redis_rate_allown.lua EVALSHA "$(sha build/redis_rate_allown.lua)" 1 $k 1000 1000 1 1
fi
per "FCALL tb_take 1000 1000 1" - FCALL tb_take 1 $k 1000 1000 1
per "recipe tb.lua" bench/lua/tb.lua EVALSHA "$(sha bench/lua/tb.lua)" 1 $k 1000 1000 1
per "FCALL sw_hit 100000 60" - FCALL sw_hit 1 $k 100000 60
per "recipe sw.lua" bench/lua/sw.lua EVALSHA "$(sha bench/lua/sw.lua)" 1 $k 100000 60
per "FCALL fw_hit 100000 60" - FCALL fw_hit 1 $k 100000 60
per "recipe fw.lua" bench/lua/fw.lua EVALSHA "$(sha bench/lua/fw.lua)" 1 $k 100000 60
per "FCALL sl_hit 100000 60" - FCALL sl_hit 1 $k 100000 60
per "recipe sl.lua" bench/lua/sl.lua EVALSHA "$(sha bench/lua/sl.lua)" 1 $k 100000 60
per "FCALL conc_acquire 100000 60" - FCALL conc_acquire 1 $k 100000 60 id__rand_int__
per "recipe conc_acquire.lua" bench/lua/conc_acquire.lua EVALSHA "$(sha bench/lua/conc_acquire.lua)" 1 $k 100000 60 id__rand_int__
