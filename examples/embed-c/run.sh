#!/usr/bin/env bash
# run.sh: build the C embedding example against an INSTALLED libdurable, both
# ways an embedder finds it -- pkg-config and CMake's find_package -- and run
# each build.
#
#   bash examples/embed-c/run.sh [PREFIX]
#
# PREFIX is where `cmake --install build --prefix PREFIX` put durable
# (default: a fresh temporary folder, installed from build/ first).  Both
# builds link the shared libdurable.so.0 and run from the prefix, so nothing
# of the build tree is used but what was installed.
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
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null)
libdir=$prefix/${libdir:-lib}
store=${DURABLE_EXAMPLE_STORE:-sqlite::memory:}
# a library built with the sanitizers (DURABLE_SANITIZE=1 or thread) needs
# them here too
sanitize=()
if grep -q '^DURABLE_TSAN:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  sanitize=(-fsanitize=thread)
elif grep -q '^DURABLE_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  sanitize=(-fsanitize=address,undefined)
fi

echo "embed-c: pkg-config"
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# shellcheck disable=SC2046 # word splitting of pkg-config's flags is wanted
cc -Wall -Wextra "${sanitize[@]}" "$here/main.c" $(pkg-config --cflags --libs durable) \
  -Wl,-rpath,"$(pkg-config --variable=libdir durable)" -o "$work/embed-pc"
readelf -d "$work/embed-pc" | grep -q 'NEEDED.*libdurable\.so\.0' ||
  { echo "embed-c: the pkg-config build does not link libdurable.so.0" >&2; exit 1; }
"$work/embed-pc" "$store"

echo "embed-c: find_package"
cmake -S "$here" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="-Wall -Wextra ${sanitize[*]}" \
  -DCMAKE_EXE_LINKER_FLAGS="${sanitize[*]}" >"$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log" >&2; exit 1; }
cmake --build "$work/cmake" >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
readelf -d "$work/cmake/embed" | grep -q 'NEEDED.*libdurable\.so\.0' ||
  { echo "embed-c: the find_package build does not link libdurable.so.0" >&2; exit 1; }
"$work/cmake/embed" "$store"
