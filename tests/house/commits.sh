#!/usr/bin/env bash
# commits.sh: every commit since the house adopted libuv's commit habit reads
# as one change: a subject `area: imperative summary` of at most 72
# characters, then a blank line before any body.  A subject that is a
# paragraph cannot be read in `git log --oneline`, nor a change in it
# bisected or reverted alone.
#
#   bash tests/house/commits.sh [TOP]
#
# TOP is the top of the checkout (default: this script's tree).  The commits
# checked are those after FIRST below, the last commit made before the rule;
# older ones are history and stay as they are.  Outside a git checkout, or in
# a shallow clone that does not reach FIRST, there is nothing to check and it
# says so (exit 0).  It prints each commit that breaks the rule and exits 1
# if there is one.
set -euo pipefail
FIRST=69e730f84356ed1439dbc402bc76a1b166b5ec25
top=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}

if ! git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
  echo "commits.sh: $top is not a git checkout; nothing to check"
  exit 0
fi
first=$(git -C "$top" rev-parse --verify -q "${FIRST:0:12}^{commit}" || true)
if [[ -z $first ]]; then
  echo "commits.sh: this clone does not reach ${FIRST:0:12}; nothing to check"
  exit 0
fi

# `area: summary`: the area is what the change is in (a folder, a file, a
# concept; several may be named, "unix, win"), then a colon and the summary.
shape='^[A-Za-z0-9_./{}*+-][A-Za-z0-9_./{}, *+-]*: [^ ]'
bad=0
while read -r hash; do
  subject=$(git -C "$top" log -1 --format=%s "$hash")
  second=$(git -C "$top" log -1 --format=%B "$hash" | sed -n 2p)
  why=
  if ((${#subject} > 72)); then
    why="subject of ${#subject} characters (at most 72)"
  elif ! [[ $subject =~ $shape ]]; then
    why="subject is not 'area: summary'"
  elif [[ -n $second ]]; then
    why="no blank line after the subject"
  fi
  if [[ -n $why ]]; then
    echo "commit ${hash:0:12}: $why: $subject"
    bad=$((bad + 1))
  fi
done < <(git -C "$top" rev-list --no-merges "$first..HEAD")

if ((bad)); then
  echo "commits.sh: $bad commit(s) break the house's commit habit"
  exit 1
fi
echo "commits.sh: every commit since ${first:0:12} reads as one change"
