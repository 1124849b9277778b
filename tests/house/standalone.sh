#!/usr/bin/env bash
# standalone.sh: the repository stands on its own.  A reader has only what is
# in it, so no file may send them to a document that is not (a design or style
# paper kept elsewhere, a numbered issue): such a file states the rule itself.
#
#   bash tests/house/standalone.sh [TOP]
#
# TOP is the top of the checkout (default: this script's tree).  It reads the
# files git tracks or would (every file below TOP outside a git checkout),
# prints each line that points outside, and exits 1 if there is one.
set -euo pipefail
top=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cd "$top"

# What points outside: the design and style papers by name or section, an
# issue by number, a section of the reference, the folder beside the clone.
pattern='DESIGN\.md|STYLE\.md|DESIGN( §| ?[0-9]+\.[0-9])|[Ii]ssues? #?[0-9]+|reference section|\.\./shared'

if git rev-parse --git-dir >/dev/null 2>&1; then
  files() { git ls-files -z --cached --others --exclude-standard; }
else
  files() { find . -type f -not -path './.git/*' -print0; }
fi
self=tests/house/standalone.sh
hits=$(files | grep -zv "^\(\./\)\?$self\$" | xargs -0 grep -nIE "$pattern" -- || true)
if [[ -n $hits ]]; then
  echo "$hits"
  echo "standalone.sh: $(wc -l <<<"$hits") line(s) point at documents outside the repository"
  exit 1
fi
echo "standalone.sh: no file points outside the repository"
