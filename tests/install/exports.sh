#!/usr/bin/env bash
# exports.sh: libdurable.so exports exactly durable.h, core.so exactly
# luaopen_durable_core.
#
#   bash tests/install/exports.sh LIBDURABLE_SO CORE_SO DURABLE_H
#
# The set libdurable.so exports (nm -D --defined-only) must equal the set of
# functions durable.h declares (read from the preprocessed header, so that
# comments do not count): an internal durable__* call that leaks, or a public
# declaration whose definition is hidden, fails.  Its SONAME must be
# libdurable.so.MAJOR.  The Lua module must export its luaopen_ alone.
set -euo pipefail
lib=$1 core=$2 header=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/durable-exports.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0

major=$(sed -n 's/^#define DURABLE_VERSION_MAJOR \([0-9]*\)$/\1/p' "$header")
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
if [[ $soname != "libdurable.so.$major" ]]; then
  echo "FAIL: SONAME of $lib is '$soname', not libdurable.so.$major"
  fail=1
fi

nm -D --defined-only "$lib" | awk '{print $3}' | sort -u >"$work/exported"
# Declarations: NAME( not preceded by (* (a function pointer type).
cc -E -P -I"$(dirname "$header")" "$header" | tr '\n' ' ' |
  grep -oE '(\(\*)?\bdurable_[a-z0-9_]+ *\(' | grep -v '^(\*' |
  grep -oE 'durable_[a-z0-9_]+' | sort -u >"$work/declared"
if ! diff "$work/declared" "$work/exported" >"$work/diff"; then
  echo "FAIL: libdurable.so exports other than what durable.h declares"
  echo "  (< declared, not exported; > exported, not declared):"
  sed 's/^/  /' "$work/diff" | grep '^  [<>]' | head -n 40
  fail=1
fi
echo "libdurable.so: $(wc -l <"$work/exported") symbols exported," \
  "$(wc -l <"$work/declared") functions declared in durable.h"

nm -D --defined-only "$core" | awk '{print $3}' | sort -u >"$work/core"
if [[ $(cat "$work/core") != luaopen_durable_core ]]; then
  echo "FAIL: core.so exports $(wc -l <"$work/core") symbols, not only luaopen_durable_core:"
  grep -v '^luaopen_durable_core$' "$work/core" | head -n 20 | sed 's/^/  /'
  fail=1
fi
echo "core.so: $(wc -l <"$work/core") symbol exported"
exit "$fail"
