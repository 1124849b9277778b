#!/usr/bin/env bash
# sizes.sh: no C file of the library, the command or the Lua module runs past
# 1,200 lines.  A file that long has always turned out to hold two or three
# concepts under one name; past the limit, cut it where its concepts part
# (each file says at its top the one thing it is).
#
#   bash tests/house/sizes.sh [TOP]
#
# TOP is the top of the checkout (default: this script's tree).  It prints
# each .c file under src/ and bindings/ over the limit and exits 1 if there
# is one.
set -euo pipefail
top=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
limit=1200
over=0
while IFS= read -r -d '' file; do
  lines=$(wc -l <"$file")
  if ((lines > limit)); then
    echo "${file#"$top"/}: $lines lines (at most $limit)"
    over=$((over + 1))
  fi
done < <(find "$top/src" "$top/bindings" -name '*.c' -print0)
if ((over)); then
  echo "sizes.sh: $over file(s) over $limit lines"
  exit 1
fi
echo "sizes.sh: every C file under src/ and bindings/ is at most $limit lines"
