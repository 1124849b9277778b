#!/usr/bin/env bash
# circles.sh: which object files call each other in a circle.
#
#   bash tests/house/circles.sh OBJ...
#
# An arrow A -> B means A uses a symbol that B defines (nm).  Every loop
# among the arrows is printed, as tsort(1) finds them; the exit status is 1
# when there is one.  For instance, the files of one layer or of all of
# libdurable, in a build tree:
#
#   bash tests/house/circles.sh build/src/CMakeFiles/durable_*.dir/*/*.o
#   bash tests/house/circles.sh build/bindings/lua/CMakeFiles/durable_lua_objects.dir/*.o
#
# An argument may hold several paths separated by spaces (ctest passes each
# target's objects as one).  ctest's house/circles runs it on libdurable
# and on the Lua module's C files: a circle added to either fails it.
set -euo pipefail
objs=()
for arg in "$@"; do
  read -r -a some <<<"$arg"
  objs+=("${some[@]}")
done
set -- "${objs[@]}"
(($#)) || { echo "usage: circles.sh OBJ..." >&2; exit 2; }
# a file is named by its folder and name (hub/mesh.c.o, lua/mesh.c.o)
name() { local dir=${1%/*}; echo "${dir##*/}/${1##*/}"; }
declare -A home # symbol -> the file defining it
for obj in "$@"; do
  n=$(name "$obj")
  while read -r sym; do home[$sym]=$n; done \
    < <(nm -g --defined-only "$obj" | awk 'NF == 3 { print $3 }')
done
edges=$(for obj in "$@"; do
  from=$(name "$obj")
  echo "$from $from" # every file is a node, arrows or none
  nm -u "$obj" | awk '{ print $NF }' | while read -r sym; do
    to=${home[$sym]:-}
    if [[ -n $to && $to != "$from" ]]; then echo "$from $to"; fi
  done
done | sort -u)
loops=$( (tsort <<<"$edges" 2>&1 >/dev/null || true) |
  sed -n 's/^tsort: -: input contains a loop:/a circle:/p; s/^tsort: /  /p')
if [[ -n $loops ]]; then
  echo "$loops"
  exit 1
fi
echo "circles.sh: no circle among $# files"
