#!/usr/bin/env bash
# prefix.sh: `cmake --install` into a fresh prefix gives what
# doc/operations.md ("Installing") says, and the installed command works from there.
#
#   bash tests/install/prefix.sh BUILD_DIR
#
# Checks the layout (library, package files, manual page, completion,
# plugins, documentation), runs the bash completion against the installed command
# (completion.sh), and hosts an installed plugin BY NAME with the installed
# command (`durable run document_log`), which must find it in
# PREFIX/share/durable/plugins (the host names the file it hosts).
set -uo pipefail
build=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/durable-prefix.XXXXXX")
host=
cleanup() {
  [[ -n $host ]] && kill -KILL "$host" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
prefix=$work/prefix
fail=0
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; exit 1; }
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
for f in bin/durable include/durable.h "$libdir/libdurable.so.0" "$libdir/libdurable.a" \
  "$libdir/pkgconfig/durable.pc" "$libdir/cmake/durable/durableConfig.cmake" \
  "$libdir/cmake/durable/durableConfigVersion.cmake" "$libdir/lua/5.4/durable/core.so" \
  share/lua/5.4/durable/init.lua share/man/man1/durable.1.gz \
  share/bash-completion/completions/durable share/durable/plugins/document_log.lua \
  share/doc/durable/README.md share/doc/durable/copyright share/doc/durable/doc/operations.md \
  share/doc/durable/examples/quickstart.sh; do
  [[ -e $prefix/$f ]] || { echo "FAIL: $f is not installed"; fail=1; }
done

bash "$here/completion.sh" "$prefix/share/bash-completion/completions/durable" "$prefix/bin" ||
  fail=1

# durable run NAME: the installed plugin, found beside the installed command
cd "$work" || exit 1
"$prefix/bin/durable" --store "sqlite:$work/run.db" run document_log >"$work/run.out" 2>&1 &
host=$!
for _ in $(seq 100); do
  grep -q 'durable run: hosting' "$work/run.out" && break
  kill -0 "$host" 2>/dev/null || break
  sleep 0.1
done
if ! grep -qF "hosting $prefix/share/durable/plugins/document_log.lua" "$work/run.out"; then
  echo "FAIL: durable run document_log did not host the installed plugin:"
  sed 's/^/  | /' "$work/run.out"
  fail=1
fi
kill -INT "$host" 2>/dev/null
wait "$host"
rc=$?
host=
if ((rc != 0)); then
  echo "FAIL: durable run exited $rc after SIGINT"
  fail=1
fi
out=$("$prefix/bin/durable" --store "sqlite:$work/run.db" run no_such_plugin 2>&1)
if [[ $out != *"no plugin 'no_such_plugin'"*"$prefix/share/durable/plugins"* ]]; then
  echo "FAIL: a missing plugin's error does not name where it looked: $out"
  fail=1
fi
# the installed command never looks in the source tree it was built from
# (an installed command must not trust that folder: it may be anyone's)
src_plugins=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/plugins
if [[ $out == *"$src_plugins"* ]]; then
  echo "FAIL: the installed command looked in the source tree: $out"
  fail=1
fi
# nine plugins by name from $DURABLE_PLUGIN_PATH: each is hosted, none twice
mkdir -p "$work/pp"
names=()
for i in 0 1 2 3 4 5 6 7 8; do
  printf 'return { node_types = { Nine%d = function(config) end } }\n' "$i" >"$work/pp/p$i.lua"
  names+=("p$i")
done
DURABLE_PLUGIN_PATH=$work/pp "$prefix/bin/durable" --store "sqlite:$work/nine.db" run "${names[@]}" \
  >"$work/nine.out" 2>&1 &
pid=$!
for _ in $(seq 50); do
  grep -qF "hosting" "$work/nine.out" && break
  sleep 0.1
done
kill -INT "$pid" 2>/dev/null
wait "$pid"
for i in 0 1 2 3 4 5 6 7 8; do
  if ! grep -qF "$work/pp/p$i.lua" "$work/nine.out"; then
    echo "FAIL: durable run with nine plugins by name did not host p$i:"
    cat "$work/nine.out"
    fail=1
    break
  fi
done
((fail)) || echo "prefix: ok ($prefix)"
exit "$fail"
