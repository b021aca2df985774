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
# (GODEBUG=asyncpreemptoff=1): its signal, SIGURG, which the runtime sends
# to a thread that has run Go code for 10 ms, aborts Debian bookworm's
# valgrind 3.19 (`Callgrind: threads.c:247 (vgCallgrind_post_signal):
# Assertion 'sigNum == vgCallgrind_current_state.sig' failed`); under
# valgrind the runtime's own start, while the module loads, takes that
# long. And without RDTSCP (cpu.rdtscp=off), which Go's runtime.cputicks
# uses where the CPU has it and valgrind 3.19 cannot decode (SIGILL whenever
# the runtime's lock spun: most runs on an AMD EPYC). A Go library reads
# GODEBUG from the environment strings the process started with, and
# redis-server writes its title over them before it loads modules: without
# --set-proc-title no the runtime never sees GODEBUG, preempts, and
# valgrind aborts at load (`strace -f` or valgrind's --trace-signals=yes
# show the runtime's tgkill of SIGURG just before).
#
# What is counted is the command's work and the server's around it (the
# protocol, the event loop), less what depends on the clock or on the
# server's random hash seed rather than on the calls:
# - serverCron, the once-a-second housekeeping, is left out
#   (--toggle-collect), and active expiry is off (DEBUG SET-ACTIVE-EXPIRE 0,
#   hence --enable-debug-command local: Redis 7.0 or later). A key
#   GCRA.THROTTLE 15 30 60 writes expires 2 s later, so the share of keys
#   the server deleted during a run grew with the run's length, that is
#   with the machine's load: up to 1,800 instructions per call. A key a
#   call finds expired is still deleted by that call, as in any server. (A
#   module's own cron-loop work would be left out too; this one has none.)
# - The slow log is off (--slowlog-log-slower-than -1): a call that took
#   10 ms of wall-clock time, as many do under valgrind on a busy machine,
#   was copied into it.
# - Looking a command's name up in the command table (lookupCommandLogic:
#   the call's own, and those RM_Replicate and RM_Call make for each
#   command they name) is left out: its cost depends on the hash seed the
#   server draws at start, which puts a name alone in its bucket or behind
#   others; RL.ALL over 3 keys moved by 700 instructions per call between
#   runs of one build.
# The Go runtime's other threads (sysmon, idle Ps looking for work, the
# garbage collector's workers) are counted: about 300 instructions per call,
# moving by about 50 with the run's length.
#
# The keys are random, so each total is the median of RUNS runs (default
# 3), printed with the least and the most of them. Runs of one build fell
# within 0.7% of each other, and one build's medians (the module and the
# baseline built from the same code) within 0.3%, on a busy 2-core AMD EPYC.
#
# Usage: bench/callgrind.sh [N]   (make callgrind; N defaults to 20000)
# With BASELINE_SO=path, the module's rows are counted again with that
# build of the module (make callgrind builds the one BASELINE_REF names),
# each command it registers. With CALLGRIND_KEEP=dir, each run's profile is
# kept there, named after the command, for `callgrind_annotate
# dir/<name>.out`: where the instructions go. Prints one line per command.
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
# median of RUNS runs, then the least and the most of them.
total() {
  local i
  for i in $(seq "${RUNS:-3}"); do
    once "$@"
  done | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)], v[1], v[NR] }'
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

# said: what the server (or valgrind) said before it failed.
said() {
  if grep -q "vgCallgrind_post_signal" "$work/server.log"; then
    grep -m1 "Assertion" "$work/server.log" >&2
    echo "callgrind: a signal reached the Go runtime (SIGURG: is GODEBUG=asyncpreemptoff=1 lost?); see bench/callgrind.sh" >&2
    return
  fi
  # valgrind's own failures, else the server's last lines (not valgrind's).
  grep -m3 -i "impossible\|internal error\|terminating\|Assertion" "$work/server.log" >&2 ||
    grep -v '^[-=][-=][0-9]*[-=][-=]' "$work/server.log" | tail -5 >&2
}

run() {
  local module=${MODULE:-$so}
  local port out=$work/callgrind.out
  port=$(free_port)
  rm -f "$out"
  GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind --callgrind-out-file="$out" \
    --toggle-collect=serverCron --toggle-collect=lookupCommandLogic --collect-atstart=yes \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --hz 1 --set-proc-title no \
    --enable-debug-command local --slowlog-log-slower-than -1 \
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
    said
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
  fi
  redis-cli -p "$port" DEBUG SET-ACTIVE-EXPIRE 0 >/dev/null
  # PLAN: the limit the hash b:plan holds in its field api, for LIMITS rows.
  if [ -n "${PLAN:-}" ]; then redis-cli -p "$port" HSET b:plan api "$PLAN" >/dev/null; fi
  if ! timeout 900 redis-benchmark -p "$port" -c 1 -P 16 -n "$n" -r 100000 -q "$@" >/dev/null; then
    echo "callgrind: redis-benchmark $* failed; the server said:" >&2
    said
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
  fi
  redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$pid" || true
  awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

echo "$(valgrind --version), $(redis-server --version | cut -d' ' -f1-3), N = $n, median of ${RUNS:-3} runs"
read -r base _ < <(total PING)
measure() {
  local name=$1
  shift
  local t lo hi
  read -r t lo hi < <(total "$@")
  if [ -n "${CALLGRIND_KEEP:-}" ]; then
    mkdir -p "$CALLGRIND_KEEP"
    cp "$work/callgrind.out" "$CALLGRIND_KEEP/$(echo "$name" | tr -c 'A-Za-z0-9.\n' '_').out"
  fi
  echo "$name: $(((t - base) / n)) instructions per call (N = $n, PING baseline subtracted, median of ${RUNS:-3} runs:" \
    "$(((lo - base) / n)) to $(((hi - base) / n)))"
}
# registers MODULE CMD: whether MODULE registers CMD (a server of its own,
# without valgrind): an older baseline may lack a command.
registers() {
  local port pid found=
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --loadmodule "$1" \
    >"$work/registers.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    redis-cli -p "$port" PING >/dev/null 2>&1 && break
    sleep 0.1
  done
  [ -n "$(redis-cli -p "$port" COMMAND INFO "$2" 2>/dev/null)" ] && found=1
  redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
  wait "$pid" || true
  [ -n "$found" ]
}

# module NAME CMD...: a row of the module's, then the same with
# BASELINE_SO's build right after it (so both see the same load on the
# machine), when that build registers CMD.
module() {
  local name=$1
  shift
  measure "$name" "$@"
  [ -n "${BASELINE_SO:-}" ] || return 0
  if registers "$BASELINE_SO" "$1"; then
    MODULE=$BASELINE_SO measure "$name, baseline build" "$@"
  else
    echo "$name, baseline build: the baseline build has no $1"
  fi
}

module "GCRA.THROTTLE" GCRA.THROTTLE "b:g:__rand_int__" 15 30 60
measure "C reference (CREF.GCRA)" CREF.GCRA "b:c:__rand_int__" 15 30 60
module "SW.HIT" SW.HIT "b:s:__rand_int__" 16 60
module "RL.ALL, 2 GCRA keys" RL.ALL 2 "b:a:__rand_int__" "b:b:__rand_int__" GCRA 15 30 60 1 GCRA 15 30 60 1
module "RL.ALL, 3 GCRA keys" RL.ALL 3 "b:a:__rand_int__" "b:b:__rand_int__" "b:c:__rand_int__" \
  GCRA 15 30 60 1 GCRA 15 30 60 1 GCRA 15 30 60 1
# The fixed window, and what SPREAD (a SHA-1 of the key) and SPAN (three
# more integers parsed) add to it; the options are this build's only.
module "FW.HIT" FW.HIT "b:f:__rand_int__" 16 60
measure "FW.HIT SPREAD" FW.HIT "b:f:__rand_int__" 16 60 SPREAD
measure "FW.HIT SPAN" FW.HIT "b:f:__rand_int__" 16 2682000 SPAN 1796083200000 1798761600000 1801440000000
# LIMITS: the hash read with the key, its field parsed in place of the
# call's limit and window (PLAN), or absent (the call's stand).
PLAN="16 60" measure "FW.HIT LIMITS" FW.HIT "b:f:__rand_int__" 100 60 LIMITS b:plan api
measure "FW.HIT LIMITS, no hash" FW.HIT "b:f:__rand_int__" 16 60 LIMITS b:plan api
