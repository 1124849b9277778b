#!/usr/bin/env bash
# quickstart.sh: the main job -- durable streams on the embedded SQLite
# default, resuming where they stopped.
#
#   bash examples/quickstart.sh
#
# Installs what is missing and builds (tests/support/setup.sh), then, in a
# fresh temporary folder with the default store (sqlite:durable.db there):
#
#   1. makes a Document node and starts a host: `durable run` with the
#      DocumentLog plugin (plugins/document_log.lua);
#   2. appends a burst of pieces with `durable publish` from other
#      processes; the host applies them in order;
#   3. stops the host in the middle (SIGINT: the item in flight finishes, the
#      lease is released) while the appends go on, and shows the stream's
#      state: items wait, saved, while no host runs;
#   4. starts the host again: it resumes after its checkpoint;
#   5. shows the document with `durable get`: every piece exactly once, in
#      order.
#
# Each command is printed before it runs.  The host's log lines (lease
# granted, released) are shown as they come, prefixed with "host |".
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DURABLE_BUILD_DIR:-$root/build}
[[ $build == /* ]] || build=$PWD/$build
export DURABLE_BUILD_DIR=$build
bash "$root/tests/support/setup.sh"

bin=$build/durable
plugin=$root/plugins/document_log.lua
work=$(mktemp -d "${TMPDIR:-/tmp}/durable-quickstart.XXXXXX")
host_pid=
cleanup() {
  if [[ -n $host_pid ]] && kill -0 "$host_pid" 2>/dev/null; then
    kill -TERM "$host_pid" 2>/dev/null || true
    wait "$host_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
unset DURABLE_STORE # the default store: sqlite:durable.db, right here

say() { printf '\n== %s\n' "$*"; }

# Print a command the way it would be typed, then run it.
show() {
  local out=$ arg
  for arg in "$@"; do
    if [[ $arg =~ ^[A-Za-z0-9_@:./=+-]+$ ]]; then out+=" $arg"; else out+=" '${arg//\'/\'\\\'\'}'"; fi
  done
  printf '%s\n' "$out"
  if [[ $1 == durable ]]; then shift; "$bin" "$@"; else "$@"; fi
}

start_host() {
  printf '$ durable run %s &\n' "plugins/document_log.lua"
  "$bin" run "$plugin" > >(sed -u 's/^/host | /') 2> >(sed -u 's/^/host | /' >&2) &
  host_pid=$!
}

stop_host() {
  printf '$ kill -INT %s    # the host leaves gracefully\n' "$host_pid"
  kill -INT "$host_pid"
  wait "$host_pid"
  host_pid=
}

# The text applied so far, and how many pieces (from the node's content).
applied() {
  "$bin" get @Space/doc | sed -n 's/.*"applied":\([0-9]*\).*/\1/p'
}

wait_applied() {
  local want=$1 i
  for ((i = 0; i < 300; i++)); do
    [[ $(applied) -ge $want ]] 2>/dev/null && return 0
    sleep 0.1
  done
  echo "quickstart: the host did not apply $want pieces in 30 s" >&2
  return 1
}

# publish FIRST LAST [PAUSE]: one `durable publish` process per piece
publish() {
  local i
  for ((i = $1; i <= $2; i++)); do
    "$bin" publish DocumentLog Space/doc \
      "{\"\$type\":\"DocumentLogAppend\",\"text\":\"piece $i. \",\"offset\":-1}" >/dev/null
    [[ -z ${3:-} ]] || sleep "$3"
  done
  printf '(published pieces %d..%d to DocumentLog@Space/doc)\n' "$1" "$2"
}

echo "In $work, on the default store sqlite:durable.db"

say "A document, and a host serving its NodeType with the DocumentLog plugin"
show durable put Space/doc Document '{"title":"Quickstart"}'
start_host
sleep 0.5

say "A burst of appends from other processes; the host applies them in order"
show durable publish DocumentLog Space/doc '{"$type":"DocumentLogAppend","text":"piece 1. ","offset":-1}'
publish 2 20 0.1 &
burst=$!
wait_applied 5

say "Stop the host in the middle, while the appends go on"
stop_host
echo "(the host applied $(applied) pieces before it left)"
wait "$burst"
show durable streams

say "Start the host again: it resumes after its acknowledged checkpoint"
start_host
wait_applied 20
stop_host

say "The document: every piece exactly once, in order"
show durable get @Space/doc
text=$("$bin" get @Space/doc)
for ((i = 1; i <= 20; i++)); do
  n=$(grep -o "piece $i\. " <<<"$text" | wc -l)
  if [[ $n -ne 1 ]]; then
    echo "quickstart: piece $i appears $n times" >&2
    exit 1
  fi
done
expected=$(for ((i = 1; i <= 20; i++)); do printf 'piece %d. ' "$i"; done)
grep -qF "\"text\":\"$expected\"" <<<"$text" || {
  echo "quickstart: the pieces are not in order" >&2
  exit 1
}
show durable search namespace:Space/doc/_DurableStream
echo
echo "quickstart: ok -- 20 pieces, each applied once, in order, across a host restart"
