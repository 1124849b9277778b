#!/usr/bin/env bash
# run.sh: two `durable run` hosts and producer processes on one PostgreSQL;
# one host is SIGKILLed in the middle and the other takes over its streams.
#
#   bash examples/multi-process/run.sh                 # a private PostgreSQL
#   DURABLE_STORE=postgresql://... bash examples/multi-process/run.sh
#
# Installs what is missing and builds (tests/support/setup.sh).  Runs on
# $DURABLE_STORE when it is a postgresql:// (or postgres://) URL; otherwise
# starts a private PostgreSQL with tests/support/pg.sh (a unix socket in a
# folder under /tmp, stopped and removed on exit).  Then, under a namespace
# of its own (MultiProcess/r<time><pid>, so a shared database is fine):
#
#   1. makes four Counter nodes and starts two hosts, A and B, both serving
#      the Counter NodeType (durable run examples/multi-process/counter.lua);
#   2. publishes {"i":1}, {"i":2}, ... to each counter's CounterLog stream,
#      one `durable publish` process per item; the first append to each
#      stream wakes both hosts, and exactly one of them wins its lease;
#   3. halfway, SIGKILLs the host that holds the most leases (the pid in
#      each stream node's SubscriberInstance) -- no leave, no
#      release: its leases stay in the stream nodes -- while the appends go
#      on; the other host finds the holder dead within a second or two and
#      takes the streams over (its log says TOOK OVER);
#   4. waits until every counter applied every item, stops the survivor
#      (SIGTERM: it releases its leases and exits 0) and checks, with
#      `durable get`, that each counter applied each item once, in order.
#
# Exits 0 when all of that holds, 1 otherwise (saying what did not).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${DURABLE_BUILD_DIR:-$root/build}
[[ $build == /* ]] || build=$PWD/$build
export DURABLE_BUILD_DIR=$build
bash "$root/tests/support/setup.sh"

bin=$build/durable
plugin=$here/counter.lua
counters=4 # streams
items=30   # per stream
work=$(mktemp -d "${TMPDIR:-/tmp}/durable-multi-process.XXXXXX")
own_pg=
host_pids=()
producer_pid=

cleanup() {
  local pid
  [[ -z $producer_pid ]] || kill -TERM "$producer_pid" 2>/dev/null || true
  for pid in "${host_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  [[ -z $own_pg ]] || durable_pg_stop
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "multi-process: $*" >&2
  exit 1
}

say() { printf '\n== %s\n' "$*"; }

if [[ ${DURABLE_STORE:-} =~ ^postgres(ql)?:// ]]; then
  store=$DURABLE_STORE
else
  # a cluster of our own; never one the caller's environment points at
  unset DURABLE_TEST_PG DURABLE_TEST_PG_DIR DURABLE_TEST_PG_CTL DURABLE_TEST_PG_VERSION
  # shellcheck source=tests/support/pg.sh
  source "$root/tests/support/pg.sh"
  durable_pg_start || fail "could not start a private PostgreSQL"
  own_pg=1
  store=$DURABLE_TEST_PG
fi
export DURABLE_STORE=$store
unset DURABLE_LOG # the hosts' default log lines: leases granted, taken over, released

ns=MultiProcess/r$(date +%s)$$
owners=()
for ((c = 1; c <= counters; c++)); do owners+=("$ns/counter-$c"); done

echo "On $store, under $ns"

# start_host NAME: a host in the background, its log in $work/host-NAME.log
declare -A pid_of
start_host() {
  local name=$1 i
  "$bin" run "$plugin" 2>"$work/host-$name.log" &
  pid_of[$name]=$!
  host_pids+=("$!")
  for ((i = 0; i < 100; i++)); do
    grep -q "durable run: hosting" "$work/host-$name.log" && break
    kill -0 "${pid_of[$name]}" 2>/dev/null || fail "host $name did not start: $(cat "$work/host-$name.log")"
    sleep 0.1
  done
  printf '$ durable run examples/multi-process/counter.lua &    # host %s, pid %s\n' \
    "$name" "${pid_of[$name]}"
}

# publish_all: {"i":1..items} to every counter, one `durable publish`
# process per item; "OWNER SEQUENCE" lines in $work/published
publish_all() {
  local i owner seq
  for ((i = 1; i <= items; i++)); do
    for owner in "${owners[@]}"; do
      seq=$("$bin" publish CounterLog "$owner" "{\"i\":$i}") || {
        echo "multi-process: durable publish CounterLog $owner {\"i\":$i} failed" >&2
        return 1
      }
      [[ $seq == "$i" ]] || {
        echo "multi-process: $owner: item $i got sequence $seq" >&2
        return 1
      }
      echo "$owner $seq" >>"$work/published"
    done
  done
}

# The pid in the SubscriberInstance (HOST:PID:hex) of each stream node of
# this run that is held, one a line.
holders() {
  local owner
  for owner in "${owners[@]}"; do
    "$bin" get "@$owner/_DurableStream/CounterLog" |
      sed -n 's/.*"SubscriberInstance":"[^"]*:\([0-9][0-9]*\):[0-9a-f]*".*/\1/p'
  done
}

# A number field of a node's content: field PATH NAME
field() {
  "$bin" get "@$1" | grep -o "\"$2\":[0-9]*" | head -n 1 | cut -d: -f2
}

say "Four counters, and two hosts serving their NodeType"
for owner in "${owners[@]}"; do
  "$bin" put "$owner" Counter '{}' >/dev/null
done
echo "(made ${owners[*]})"
start_host A
start_host B

say "Producers append $items items to each counter; kill the busiest host halfway"
: >"$work/published"
publish_all &
producer_pid=$!
half=$((counters * items / 2))
for ((i = 0; i < 600; i++)); do
  [[ $(wc -l <"$work/published") -ge $half ]] && break
  kill -0 "$producer_pid" 2>/dev/null || break
  sleep 0.05
done
kill -0 "$producer_pid" 2>/dev/null || fail "the producer stopped early"

# the victim: the host whose process holds the most leases (A if none yet)
victim=A
count_a=$(holders | grep -cx "${pid_of[A]}" || true)
count_b=$(holders | grep -cx "${pid_of[B]}" || true)
((count_b > count_a)) && victim=B
survivor=B
[[ $victim == B ]] && survivor=A
held=$count_a
[[ $victim == A ]] || held=$count_b
((held > 0)) || fail "halfway, neither host holds a lease: $(holders | tr '\n' ' ')"
printf '$ kill -KILL %s    # host %s dies holding %s of %s leases, items still coming\n' \
  "${pid_of[$victim]}" "$victim" "$held" "$counters"
kill -KILL "${pid_of[$victim]}"
wait "${pid_of[$victim]}" 2>/dev/null || true

wait "$producer_pid" || fail "the producer failed"
producer_pid=
echo "(published $(wc -l <"$work/published") items in all)"

say "Host $survivor catches up"
deadline=$((SECONDS + 60))
for owner in "${owners[@]}"; do
  until [[ $(field "$owner" applied) == "$items" ]]; do
    ((SECONDS < deadline)) || fail "$owner applied $(field "$owner" applied) of $items in 60 s"
    sleep 0.2
  done
done
"$bin" streams | grep -e '^STREAM' -e "@$ns/"

say "Host $survivor's log"
grep -e "TOOK OVER" -e "lease granted" -e "applied already" "$work/host-$survivor.log" |
  sed 's/^/host '"$survivor"' | /'
took_over=$(grep -c "TOOK OVER" "$work/host-$survivor.log" || true)
((took_over > 0)) ||
  fail "host $victim died holding $held lease(s), but host $survivor never logged TOOK OVER"
redelivered=$(grep -c "applied already" "$work/host-$survivor.log" || true)

printf '$ kill -TERM %s    # host %s leaves: releases its leases, exits 0\n' \
  "${pid_of[$survivor]}" "$survivor"
kill -TERM "${pid_of[$survivor]}"
rc=0
wait "${pid_of[$survivor]}" || rc=$?
((rc == 0)) || fail "host $survivor exited $rc after SIGTERM"
host_pids=()

say "The counters: every item applied once, in order"
want_total=$((items * (items + 1) / 2))
for owner in "${owners[@]}"; do
  node=$("$bin" get "@$owner")
  printf '$ durable get @%s\n%s\n' "$owner" "$node"
  [[ $(field "$owner" applied) == "$items" ]] || fail "$owner: applied is not $items"
  [[ $(field "$owner" total) == "$want_total" ]] ||
    fail "$owner: total $(field "$owner" total), not $want_total (an item was applied twice or never)"
  ! grep -q '"out_of_order"' <<<"$node" || fail "$owner: items were applied out of order"
  stream=$("$bin" get "@$owner/_DurableStream/CounterLog")
  grep -q "\"Checkpoint\":${items}[,}]" <<<"$stream" || fail "$owner: the checkpoint is not $items"
  grep -q '"Subscriber":null' <<<"$stream" || fail "$owner: the lease was not released"
done

echo
echo "multi-process: ok -- $counters counters x $items items, each applied once, in order;"
echo "  host $victim was SIGKILLed holding $held lease(s), host $survivor took over ($took_over TOOK OVER"
echo "  line(s)); $redelivered item(s) handed over again were recognised as applied and skipped."
