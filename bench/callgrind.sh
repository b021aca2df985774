#!/usr/bin/env bash
# Instructions per call, counted by valgrind's callgrind: repeatable where
# timings on a shared machine are not. For each command, a fresh
# redis-server (Debian's, with the module and the C reference loaded) runs
# under callgrind, takes N calls on random keys from redis-benchmark, and
# shuts down; the same with N PINGs is the baseline (start-up, shutdown,
# the event loop and the protocol), subtracted from each:
#
#   instructions per call = (total with N calls - total with N PINGs) / N
#
# valgrind runs the Go runtime only without asynchronous preemption
# (GODEBUG=asyncpreemptoff=1): its signals stop valgrind's scheduler; and
# without RDTSCP (cpu.rdtscp=off), which Go's runtime.cputicks uses where
# the CPU has it and Debian's valgrind 3.19 cannot decode (SIGILL whenever
# the runtime's lock spun: most runs on an AMD EPYC). The Go runtime reads
# its CPU options from the environment the process started with, which
# redis-server overwrites to show its title: --set-proc-title no keeps it.
#
# The count still moves between runs by a few percent: the keys are random
# and the server's cron work (run 1 time a second here, --hz 1) grows with
# the run's length. Each total is therefore the median of RUNS runs
# (default 3).
#
# Usage: bench/callgrind.sh [N]   (make callgrind; N defaults to 20000)
# With BASELINE_SO=path, GCRA.THROTTLE and SW.HIT are counted again with
# that build of the module (make callgrind builds the one BASELINE_REF
# names). With CALLGRIND_KEEP=dir, each run's profile is kept there, named
# after the command, for `callgrind_annotate dir/<name>.out`: where the
# instructions go. Prints one line per command.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20000}
so=$PWD/build/ratelimit.so
cref=$PWD/build/cref.so
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for bin in valgrind redis-server redis-benchmark redis-cli; do
  command -v "$bin" >/dev/null || { echo "callgrind: $bin not found" >&2; exit 1; }
done

# free_port prints a loopback port nothing listens on.
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}

# total CMD...: the instructions a server run takes, serving N of CMD: the
# median of RUNS runs.
total() {
  local i
  for i in $(seq "${RUNS:-3}"); do
    once "$@"
  done | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# once CMD...: one run's total. valgrind now and then aborts while the Go
# runtime starts a thread (seen about once in twenty starts); such a run is
# tried again, up to 3 times.
once() {
  local try
  for try in 1 2 3; do
    run "$@" && return
    echo "callgrind: run $try of $* failed; trying again" >&2
  done
  exit 1
}

run() {
  local module=${MODULE:-$so}
  local port out=$work/callgrind.out
  port=$(free_port)
  rm -f "$out"
  GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind --callgrind-out-file="$out" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --hz 1 --set-proc-title no \
    --loadmodule "$module" --loadmodule "$cref" >"$work/server.log" 2>&1 &
  local pid=$!
  local up=
  for _ in $(seq 600); do
    if redis-cli -p "$port" PING >/dev/null 2>&1; then up=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$up" ]; then
    echo "callgrind: the server did not start; it said:" >&2
    grep -m3 -i "impossible\|internal error\|terminating" "$work/server.log" >&2 || tail -5 "$work/server.log" >&2
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
  fi
  if ! timeout 900 redis-benchmark -p "$port" -c 1 -P 16 -n "$n" -r 100000 -q "$@" >/dev/null; then
    echo "callgrind: redis-benchmark $* failed; the server said:" >&2
    grep -m3 -i "impossible\|internal error\|terminating" "$work/server.log" >&2 || tail -5 "$work/server.log" >&2
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
  fi
  redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$pid" || true
  awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

base=$(total PING)
measure() {
  local name=$1
  shift
  local t
  t=$(total "$@")
  if [ -n "${CALLGRIND_KEEP:-}" ]; then
    mkdir -p "$CALLGRIND_KEEP"
    cp "$work/callgrind.out" "$CALLGRIND_KEEP/$(echo "$name" | tr -c 'A-Za-z0-9.\n' '_').out"
  fi
  echo "$name: $(((t - base) / n)) instructions per call (N = $n, PING baseline subtracted, median of ${RUNS:-3} runs)"
}
measure "GCRA.THROTTLE" GCRA.THROTTLE "b:g:__rand_int__" 15 30 60
measure "C reference (CREF.GCRA)" CREF.GCRA "b:c:__rand_int__" 15 30 60
measure "SW.HIT" SW.HIT "b:s:__rand_int__" 16 60
measure "RL.ALL, 2 GCRA keys" RL.ALL 2 "b:a:__rand_int__" "b:b:__rand_int__" GCRA 15 30 60 1 GCRA 15 30 60 1
measure "RL.ALL, 3 GCRA keys" RL.ALL 3 "b:a:__rand_int__" "b:b:__rand_int__" "b:c:__rand_int__" \
  GCRA 15 30 60 1 GCRA 15 30 60 1 GCRA 15 30 60 1
if [ -n "${BASELINE_SO:-}" ]; then
  MODULE=$BASELINE_SO measure "GCRA.THROTTLE, baseline build" GCRA.THROTTLE "b:g:__rand_int__" 15 30 60
  MODULE=$BASELINE_SO measure "SW.HIT, baseline build" SW.HIT "b:s:__rand_int__" 16 60
fi
