#!/usr/bin/env bash
# run.sh: two `durable run` hosts and a producer on a PostgreSQL kept highly
# available by pg_auto_failover (Debian: postgresql-15-auto-failover and
# pg-auto-failover-cli); the failover tool switches the primary over in the
# middle, and nothing acknowledged is lost or applied twice.
#
#   bash examples/failover/run.sh
#
# Installs what is missing and builds (tests/support/setup.sh), then, all in
# a folder under /tmp that is removed on exit, as an unprivileged user
# (PostgreSQL refuses root):
#
#   1. a pg_auto_failover monitor and two PostgreSQL nodes on localhost
#      (ports 5500, 5501, 5502): one becomes the primary, the other its
#      synchronous standby (pg_auto_failover's default: a commit waits for
#      it, so a switchover loses nothing);
#   2. one URL that lists both nodes -- every `durable` process finds the
#      primary through it, whichever node that is;
#   3. four Counter nodes and two hosts serving them
#      (examples/multi-process/counter.lua), and a producer appending
#      {"i":1}, {"i":2}, ... to each counter's stream with `durable publish
#      --id`, which waits out the switchover and appends each item once;
#   4. halfway, `pg_autoctl perform switchover`: the standby is promoted,
#      the old primary becomes its standby; the hosts log that the server
#      changed and go on;
#   5. waits until every counter applied every item, and checks that each
#      applied each item once, in order, and that the hosts followed the
#      new primary.
#
# Exits 0 when all of that holds, 1 otherwise (saying what did not), and 77
# (skipped, for ctest) when pg_autoctl is not installed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${DURABLE_BUILD_DIR:-$root/build}
[[ $build == /* ]] || build=$PWD/$build
export DURABLE_BUILD_DIR=$build

if ! command -v pg_autoctl >/dev/null; then
  echo "failover: pg_autoctl is not installed (apt-get install postgresql-15-auto-failover pg-auto-failover-cli)" >&2
  exit 77
fi
bash "$root/tests/support/setup.sh"

bin=$build/durable
plugin=$root/examples/multi-process/counter.lua
counters=4 # streams
items=40   # per stream
# the clusters' owner: PostgreSQL refuses root, so as root an account of
# our own; else whoever runs this (the superuser the URL names)
if [[ $(id -u) -eq 0 ]]; then user=${DURABLE_PG_USER:-durable-test}; else user=$(id -un); fi
# the PostgreSQL that pg_auto_failover's extension was built for
pgbin=
for control in /usr/share/postgresql/*/extension/pgautofailover.control; do
  [[ -f $control ]] || continue
  version=${control#/usr/share/postgresql/}
  pgbin=/usr/lib/postgresql/${version%%/*}/bin
done
if [[ -z $pgbin ]]; then
  echo "failover: no pgautofailover extension (apt-get install postgresql-15-auto-failover)" >&2
  exit 77
fi
for port in 5500 5501 5502; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "failover: port $port is in use: this example needs 5500-5502" >&2
    exit 77
  fi
done
work=$(mktemp -d /tmp/durable-failover.XXXXXX)
autoctl_pids=()
host_pids=()
producer_pid=

# pg_autoctl keeps its state under $HOME (XDG folders): ours, in $work;
# and the servers' sockets go there too (PG_REGRESS_SOCK_DIR, which
# pg_autoctl reads; Debian's default folder is the postgres user's)
as_user() {
  local env=(env PATH="$pgbin:$PATH" HOME="$work/home" XDG_CONFIG_HOME="$work/home/config"
    XDG_DATA_HOME="$work/home/data" PG_REGRESS_SOCK_DIR="$work" PGHOST="$work")
  if [[ $(id -u) -eq 0 ]]; then
    (cd "$work" && runuser -u "$user" -- "${env[@]}" "$@")
  else
    (cd "$work" && "${env[@]}" "$@")
  fi
}

cleanup() {
  local pid dir
  [[ -z $producer_pid ]] || kill -TERM "$producer_pid" 2>/dev/null || true
  for pid in "${host_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for dir in node2 node1 monitor; do
    if [[ -d $work/$dir ]]; then
      as_user pg_autoctl stop --pgdata "$work/$dir" --immediate >/dev/null 2>&1 || true
    fi
  done
  for pid in "${autoctl_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  # at most 20 s for everything to end, then no more asking
  for pid in "${autoctl_pids[@]}" "${host_pids[@]}"; do
    for ((i = 0; i < 200; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "failover: $*" >&2
  for f in "$work"/*.log; do
    [[ -f $f ]] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
  done
  exit 1
}

say() { printf '\n== %s\n' "$*"; }

if [[ $(id -u) -eq 0 ]] && ! id -u "$user" >/dev/null 2>&1; then
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$user"
fi
mkdir -p "$work/home"
[[ $(id -u) -ne 0 ]] || chown -R "$user:" "$work"
chmod 755 "$work"

say "A pg_auto_failover monitor and two nodes"
common=(--pgctl "$pgbin/pg_ctl" --hostname localhost --auth trust --no-ssl)
monitor="postgres://autoctl_node@localhost:5500/pg_auto_failover?sslmode=disable"
as_user pg_autoctl create monitor --pgdata "$work/monitor" --pgport 5500 "${common[@]}" \
  --run >"$work/monitor.log" 2>&1 &
autoctl_pids+=("$!")
for ((i = 0; i < 300; i++)); do
  as_user pg_autoctl show state --pgdata "$work/monitor" >/dev/null 2>&1 && break
  kill -0 "${autoctl_pids[-1]}" 2>/dev/null || fail "the monitor did not start"
  sleep 0.2
done
for n in 1 2; do
  as_user pg_autoctl create postgres --pgdata "$work/node$n" --pgport $((5500 + n)) "${common[@]}" \
    --monitor "$monitor" --dbname durable --run >"$work/node$n.log" 2>&1 &
  autoctl_pids+=("$!")
  # one at a time: the first runs alone (single), then becomes the primary
  for ((i = 0; i < 600; i++)); do
    as_user pg_autoctl show state --pgdata "$work/monitor" 2>/dev/null |
      grep -q "$((5500 + n)) .*| *\(single\|primary\|secondary\) *| *\(single\|primary\|secondary\)" && break
    kill -0 "${autoctl_pids[-1]}" 2>/dev/null || fail "node $n did not start"
    sleep 0.2
  done
done
for ((i = 0; i < 600; i++)); do
  as_user pg_autoctl show state --pgdata "$work/monitor" 2>/dev/null |
    grep -q "| *primary *| *primary" && break
  sleep 0.2
done
as_user pg_autoctl show state --pgdata "$work/monitor" | grep -q "| *primary *| *primary" ||
  fail "no node became the primary"

store="postgresql://localhost:5501,localhost:5502/durable?user=$user&sslmode=disable"
export DURABLE_STORE=$store
unset DURABLE_LOG
echo "$ export DURABLE_STORE='$store'"

ns=Failover/r$(date +%s)$$
owners=()
for ((c = 1; c <= counters; c++)); do owners+=("$ns/counter-$c"); done

say "Four counters, two hosts, and a producer"
for owner in "${owners[@]}"; do "$bin" put "$owner" Counter '{}' >/dev/null; done
for name in A B; do
  "$bin" run "$plugin" 2>"$work/host-$name.log" &
  host_pids+=("$!")
done

# {"i":1..items} to every counter, each with its publish id: a publish cut
# off by the switchover is sent again and appended once
publish_all() {
  local i owner seq
  for ((i = 1; i <= items; i++)); do
    for owner in "${owners[@]}"; do
      seq=$("$bin" publish --id "i$i" CounterLog "$owner" "{\"i\":$i}" 2>>"$work/producer.log") || {
        echo "failover: durable publish CounterLog $owner {\"i\":$i} failed" >&2
        return 1
      }
      [[ $seq == "$i" ]] || {
        echo "failover: $owner: item $i got sequence $seq" >&2
        return 1
      }
      echo "$owner $seq" >>"$work/published"
    done
    sleep 0.05
  done
}
: >"$work/published"
publish_all &
producer_pid=$!
half=$((counters * items / 2))
for ((i = 0; i < 1200; i++)); do
  [[ $(wc -l <"$work/published") -ge $half ]] && break
  kill -0 "$producer_pid" 2>/dev/null || break
  sleep 0.05
done
kill -0 "$producer_pid" 2>/dev/null || fail "the producer stopped early"

say "The failover tool switches the primary over, items still coming"
echo "$ pg_autoctl perform switchover"
as_user pg_autoctl perform switchover --pgdata "$work/monitor" >"$work/switchover.log" 2>&1 ||
  fail "pg_autoctl perform switchover failed"
as_user pg_autoctl show state --pgdata "$work/monitor"

wait "$producer_pid" || fail "the producer failed"
producer_pid=
echo "(published $(wc -l <"$work/published") items in all)"

say "The hosts catch up"
field() { "$bin" get "@$1" | grep -o "\"$2\":[0-9]*" | head -n 1 | cut -d: -f2; }
deadline=$((SECONDS + 90))
for owner in "${owners[@]}"; do
  until [[ $(field "$owner" applied) == "$items" ]]; do
    ((SECONDS < deadline)) || fail "$owner applied $(field "$owner" applied) of $items in 90 s"
    sleep 0.2
  done
done
"$bin" streams | grep -e '^STREAM' -e "@$ns/"

say "What the hosts said"
grep -h -e "server changed" -e "lease granted" "$work"/host-*.log | head -n 12 || true
grep -q "the server changed" "$work"/host-*.log ||
  fail "no host said that the server changed"

for owner in "${owners[@]}"; do
  content=$("$bin" get "@$owner")
  total=$((items * (items + 1) / 2))
  [[ $content == *"\"total\":$total"* ]] || fail "$owner: total is not $total: $content"
  [[ $content != *out_of_order* ]] || fail "$owner: items applied out of order: $content"
done
applied_twice=$(cat "$work"/host-*.log | grep -c "applied already" || true)
echo "every counter applied items 1..$items once, in order ($applied_twice handed over again" \
  "after the switchover and found applied already)"
