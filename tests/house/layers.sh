#!/usr/bin/env bash
# layers.sh: nothing in libdurable reaches up a layer, not even at link time.
#
#   bash tests/house/layers.sh COMMON_OBJS MESH_OBJS HUB_OBJS STREAMS_OBJS
#
# Each argument is the space-separated list of one layer's object files,
# bottom first (tests/CMakeLists.txt passes them).  The build already keeps
# each layer from including a header of a layer above it (src/CMakeLists.txt);
# this checks what the compiler cannot: a function declared in a lower
# layer's header but defined above it (a hook the upper layer must register
# instead), or an extern declared by hand.  For every undefined symbol of a
# layer's objects that another layer defines, the defining layer must be
# below.  It prints every reference that points up, and exits 1 if there is
# one.
set -euo pipefail
names=(common mesh hub streams)
(($# == ${#names[@]})) || { echo "usage: layers.sh COMMON MESH HUB STREAMS" >&2; exit 2; }

declare -A home # symbol -> index of the layer defining it
for i in "${!names[@]}"; do
  read -r -a objs <<<"${@:i+1:1}"
  ((${#objs[@]})) || { echo "layers.sh: no objects for ${names[i]}" >&2; exit 2; }
  while read -r sym; do
    home[$sym]=$i
  done < <(nm -g --defined-only "${objs[@]}" | awk 'NF == 3 { print $3 }')
done

up=0
for i in "${!names[@]}"; do
  read -r -a objs <<<"${@:i+1:1}"
  for obj in "${objs[@]}"; do
    while read -r sym; do
      j=${home[$sym]:-}
      if [[ -n $j ]] && ((j > i)); then
        echo "up: ${obj##*/} (${names[i]}) uses $sym, defined in ${names[j]}"
        up=$((up + 1))
      fi
    done < <(nm -u "$obj" | awk '{ print $NF }')
  done
done
if ((up)); then
  echo "layers.sh: $up reference(s) reach up a layer"
  exit 1
fi
echo "layers.sh: ${#home[@]} symbols in ${#names[@]} layers, none used from below"
