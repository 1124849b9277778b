#!/usr/bin/env bash
# run.sh: build the C embedding example against an INSTALLED libdurable
# (found with pkg-config) and run it.
#
#   bash examples/embed-c/run.sh [PREFIX]
#
# PREFIX is where `cmake --install build --prefix PREFIX` put durable
# (default: a fresh temporary folder, installed from build/ first).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${DURABLE_BUILD_DIR:-$root/build}
work=$(mktemp -d "${TMPDIR:-/tmp}/durable-embed.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=${1:-$work/prefix}
if [[ $# -eq 0 ]]; then
  cmake --install "$build" --prefix "$prefix" >/dev/null
fi
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# a library built with the sanitizers (DURABLE_SANITIZE=1) needs them here too
sanitize=()
if grep -q '^DURABLE_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  sanitize=(-fsanitize=address,undefined)
fi
# shellcheck disable=SC2046 # word splitting of pkg-config's flags is wanted
cc -Wall -Wextra "${sanitize[@]}" "$here/main.c" $(pkg-config --cflags --libs durable) \
  -o "$work/embed"
"$work/embed" "${DURABLE_EXAMPLE_STORE:-sqlite::memory:}"
