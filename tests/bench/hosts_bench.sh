#!/usr/bin/env bash
# hosts_bench.sh: figures for many hosts on one store -- how fast one and two
# `durable run` hosts drain a backlog, and how long a SIGKILLed host's
# streams take to be taken over.  Not a test: it prints figures, asserts
# nothing about time, and exits 1 only when something fails outright.
#
#   bash tests/bench/hosts_bench.sh                  # a private PostgreSQL
#   DURABLE_STORE=postgresql://... bash tests/bench/hosts_bench.sh
#   DURABLE_STORE=sqlite:/tmp/x.db bash tests/bench/hosts_bench.sh
#
# STREAMS (default 8) Counter streams of examples/multi-process/counter.lua
# (one write of the counter per item, like a real consumer) get ITEMS
# (default 300) items each, published by one `durable lua` producer:
#   1. to one host: items/s from the first publish to the last applied;
#   2. to two hosts: the same (each stream is held by one host, so two hosts
#      share the streams, not the items; the first append to a stream both
#      see decides which);
#   3. ROUNDS (default 5) times: the host holding the most leases is
#      SIGKILLed while items wait, and the time until the survivor took over
#      every stream it held (its log says TOOK OVER) is measured.
# Uses the build in build/ (tests/support/setup.sh makes it).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${DURABLE_BUILD_DIR:-$root/build}/durable
plugin=$root/examples/multi-process/counter.lua
streams=${STREAMS:-8}
items=${ITEMS:-300}
rounds=${ROUNDS:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/durable-hosts-bench.XXXXXX")
own_pg=
pids=()

cleanup() {
  local pid
  disown -a # no "Killed" lines for the hosts stopped here
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  [[ -z $own_pg ]] || durable_pg_stop
  rm -rf "$work"
}
trap cleanup EXIT
[[ -x $bin ]] || { echo "hosts_bench: build first (bash tests/support/setup.sh)" >&2; exit 1; }

if [[ -n ${DURABLE_STORE:-} ]]; then
  store=$DURABLE_STORE
else
  unset DURABLE_TEST_PG DURABLE_TEST_PG_DIR DURABLE_TEST_PG_CTL DURABLE_TEST_PG_VERSION
  # shellcheck source=tests/support/pg.sh
  source "$root/tests/support/pg.sh"
  durable_pg_start >/dev/null
  own_pg=1
  store=$DURABLE_TEST_PG
fi
export DURABLE_STORE=$store
unset DURABLE_LOG
ns=HostsBench/r$(date +%s)$$
counters() { # counters SET: make the counters of SET, now the `owners`
  local s
  owners=()
  for ((s = 1; s <= streams; s++)); do
    owners+=("$ns/$1-c$s")
    "$bin" put "$ns/$1-c$s" Counter '{}' >/dev/null
  done
  published=0
}

now_ms() { date +%s%3N; }

# publish N: i = from..from+N-1 to every stream, one producer process
cat >"$work/produce.lua" <<'EOF'
local durable = require "durable"
local from, n = tonumber(arg[1]), tonumber(arg[2])
local mesh = assert(durable.open {})
local client = mesh:hub("client/hosts-bench")
local pending = {}
for k = 3, #arg do
  for i = from, from + n - 1 do
    pending[#pending + 1] = client:publish_durable({ namespace = "CounterLog", key = arg[k] }, { i = i })
  end
end
assert(durable.all(pending):wait())
mesh:close()
EOF
published=0
publish() {
  "$bin" lua "$work/produce.lua" $((published + 1)) "$1" "${owners[@]}"
  published=$((published + $1))
}

applied_all() { # every counter applied `published`
  local o
  for o in "${owners[@]}"; do
    "$bin" get "@$o" | grep -q "\"applied\":${published}[,}]" || return 1
  done
}

wait_applied() {
  local deadline=$((SECONDS + 300))
  until applied_all; do
    ((SECONDS < deadline)) || { echo "hosts_bench: not drained in 300 s" >&2; exit 1; }
    sleep 0.05
  done
}

declare -A pid_of
host() { # host NAME: start a host, log in $work/NAME.log
  "$bin" run "$plugin" 2>"$work/$1.log" &
  pids+=("$!")
  pid_of[$1]=$!
  until grep -q "durable run: hosting" "$work/$1.log"; do sleep 0.05; done
}

holders() { # the holder pid of each stream
  local o
  for o in "${owners[@]}"; do
    "$bin" get "@$o/_DurableStream/CounterLog" |
      sed -n 's/.*"SubscriberInstance":"[^"]*:\([0-9]*\):[0-9a-f]*".*/\1/p'
  done
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "hosts_bench on ${store%%\?*}: $streams streams x $items items, counter.lua"

# 1. one host, 2. two hosts: hosts up first, then the producer, on streams
# nobody held before; timed from the first publish to the last item applied
drain() { # drain LABEL
  local t0 t1 rate
  t0=$(now_ms)
  publish "$items"
  wait_applied
  t1=$(now_ms)
  rate=$((streams * items * 1000 / (t1 - t0 + 1)))
  echo "  $1 publish and apply $((streams * items)) items: $((t1 - t0)) ms, $rate items/s"
  last_rate=$rate
}
counters one
host A
drain "one host: "
one=$last_rate
counters two # fresh streams: A holds the first ones until it leaves
host B
drain "two hosts:"
echo "    $(awk -v a="$last_rate" -v b="$one" 'BEGIN{printf "%.2f", a/b}')x one host; leases: A $(holders | grep -cx "${pid_of[A]}" || true), B $(holders | grep -cx "${pid_of[B]}" || true)"

# 3. takeovers
: >"$work/takeover_ms"
for ((r = 1; r <= rounds; r++)); do
  ca=$(holders | grep -cx "${pid_of[A]}" || true)
  cb=$(holders | grep -cx "${pid_of[B]}" || true)
  if ((ca >= cb)); then victim=A vpid=${pid_of[A]} survivor=B held=$ca; else victim=B vpid=${pid_of[B]} survivor=A held=$cb; fi
  ((held > 0)) || { echo "hosts_bench: nobody holds a lease" >&2; exit 1; }
  before=$(grep -c "TOOK OVER" "$work/$survivor.log" || true)
  publish 20 # items waiting, so the survivor looks at once
  t0=$(now_ms)
  kill -KILL "$vpid"
  wait "$vpid" 2>/dev/null || true
  until (($(grep -c "TOOK OVER" "$work/$survivor.log" || true) >= before + held)); do
    (($(now_ms) - t0 < 60000)) || { echo "hosts_bench: no takeover in 60 s" >&2; exit 1; }
    sleep 0.01
  done
  t1=$(now_ms)
  echo "$((t1 - t0))" >>"$work/takeover_ms"
  echo "  round $r: host $victim SIGKILLed holding $held lease(s); all taken over after $((t1 - t0)) ms"
  wait_applied
  host "$victim"
done
echo "  takeover after SIGKILL: median $(median <"$work/takeover_ms") ms of $rounds (liveness_ms 1000)"
