#!/usr/bin/env bash
# quickstart.sh: the main job, on the embedded SQLite default.
#
#   bash examples/quickstart.sh
#
# Installs what is missing and builds (tests/support/setup.sh), then, in a
# fresh temporary folder, drives the `durable` command as a person would:
# puts a few nodes into the default store (sqlite:durable.db in the current
# folder), reads one back and searches them.  Each command is printed before
# it runs.  (Later this grows into the durable streams demo.)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DURABLE_BUILD_DIR:-$root/build}
[[ $build == /* ]] || build=$PWD/$build
export DURABLE_BUILD_DIR=$build
bash "$root/tests/support/setup.sh"

bin=$build/durable
work=$(mktemp -d "${TMPDIR:-/tmp}/durable-quickstart.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
unset DURABLE_STORE # the default store: sqlite:durable.db, right here

# Print a command the way it would be typed, then run it (its stderr beside
# its stdout, so a failure line shows where it happens).
show() {
  local out=$ arg
  for arg in "$@"; do
    if [[ $arg =~ ^[A-Za-z0-9_@:./=+-]+$ ]]; then
      out+=" $arg"
    else
      out+=" '${arg//\'/\'\\\'\'}'"
    fi
  done
  printf '\n%s\n' "$out"
  if [[ $1 == durable ]]; then
    shift
    "$bin" "$@" 2>&1
  else
    "$@" 2>&1
  fi
}

echo
echo "In $work, on the default store (sqlite:durable.db):"

show durable put Space/hello Document '{"title":"Hello","text":"first node"}'
show durable put Space/notes Document '{"title":"Notes"}'
# A satellite: the segment beginning with _ makes Space/notes its owner.
show durable put Space/notes/_DocumentPart/000000 DocumentPart '{"text":"part one"}'
show durable get @Space/hello
show durable search namespace:Space
show durable search namespace:Space/notes/_DocumentPart
show durable search path:Space/notes

# A failure is one line on stderr and exit status 1.
show durable get @Space/missing || echo "(exit status $?)"

show ls -l durable.db
echo
echo "quickstart: ok (the temporary folder is removed)"
