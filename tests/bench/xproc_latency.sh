#!/usr/bin/env bash
# xproc_latency.sh: publish -> handler entry latency across processes on one
# SQLite file.  Not a test: it prints figures and asserts nothing about time.
#
#   bash tests/bench/xproc_latency.sh
#   RATE=1000 COUNT=5000 bash tests/bench/xproc_latency.sh
#
# A `durable run` host of tests/bench/xproc_latency_plugin.lua and a
# separate `durable lua` producer (tests/bench/xproc_latency_producer.lua)
# share a fresh SQLite file (STORE, default sqlite:<temp dir>/x.db).  The
# producer publishes COUNT items (default 5000) paced at RATE per second
# (default 1000), each stamped with the wall clock in µs; the host's handler
# notes "now - stamp" on entry.  Prints p50 / p90 / p99 / max in ms, then the
# host's CPU time while it sat idle for IDLE seconds (default 5).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${DURABLE_BUILD_DIR:-$root/build}/durable
[[ -x $bin ]] || { echo "xproc_latency: build first" >&2; exit 1; }
rate=${RATE:-1000}
count=${COUNT:-5000}
idle=${IDLE:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/durable-xproc.XXXXXX")
host_pid=
cleanup() {
  [[ -z $host_pid ]] || kill -TERM "$host_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  [[ -n ${KEEP:-} ]] && cp "$XPROC_OUT" "$KEEP"; rm -rf "$work"
}
trap cleanup EXIT

export DURABLE_STORE=${STORE:-sqlite:$work/x.db}
unset DURABLE_LOG
export XPROC_OUT=$work/latency_us
: >"$XPROC_OUT"
probe=XprocBench/p$$
"$bin" put "$probe" LatencyProbe '{}' >/dev/null

"$bin" run "$root/tests/bench/xproc_latency_plugin.lua" 2>"$work/host.log" &
host_pid=$!
until grep -qs "durable run: hosting" "$work/host.log"; do
  kill -0 "$host_pid" 2>/dev/null || { cat "$work/host.log" >&2; exit 1; }
  sleep 0.05
done

# ticks of CPU time (utime + stime) of a process
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

t0=$(cpu_ticks "$host_pid")
sleep "$idle"
t1=$(cpu_ticks "$host_pid")
hz=$(getconf CLK_TCK)
wakeups=$(awk '/voluntary_ctxt_switches/ && !/non/ {print $2}' /proc/"$host_pid"/status)

"$bin" lua "$root/tests/bench/xproc_latency_producer.lua" "$probe" "$rate" "$count" 100
deadline=$((SECONDS + 60))
until grep -qx done "$XPROC_OUT"; do
  ((SECONDS < deadline)) || { echo "xproc_latency: the host did not see the last item in 60 s" >&2; exit 1; }
  sleep 0.05
done

echo "xproc_latency on ${DURABLE_STORE%%\?*}: $count items at $rate/s, publish -> handler entry"
grep -v done "$XPROC_OUT" | sort -n | awk '
  { a[NR] = $1 }
  END {
    printf "  n %d  p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms\n", NR,
      a[int(NR * 0.50 + 0.5)] / 1000, a[int(NR * 0.90 + 0.5)] / 1000,
      a[int(NR * 0.99 + 0.5)] / 1000, a[NR] / 1000
  }'
echo "  idle host ($idle s before the run): $((t1 - t0)) CPU ticks of $((idle * hz)) ($hz/s);" \
  "voluntary context switches so far: $wakeups"
