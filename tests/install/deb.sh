#!/usr/bin/env bash
# deb.sh: the Debian package that `cpack -G DEB` makes of a build holds what
# doc/operations.md ("Installing") says, as Debian policy wants it, and
# lintian finds no error in it.
#
#   bash tests/install/deb.sh BUILD_DIR
#
# Makes the package into a temporary folder (never into BUILD_DIR), then
# checks with dpkg-deb: the documentation under /usr/share/doc/durable
# (README.md, every doc/*.md, lua/README.md, every file of examples/, the
# copyright in the machine-readable format with LICENSE's text, and
# changelog.gz), the compressed manual page naming /usr/share/doc/durable,
# the shlibs and ldconfig trigger of libdurable.so.0, and the detached
# debugging symbols beside it (durable-dbgsym_*.ddeb).  When lintian is
# installed (apt-get install lintian), no line of its report is an error
# (E:); its warnings are shown.  Exit 77 (skipped) without dpkg-deb.
set -uo pipefail
build=$1
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if ! command -v dpkg-deb >/dev/null; then
  echo "deb: skipped, dpkg-deb is not installed (not a Debian system)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/durable-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0

started=$SECONDS
if ! cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/out" >"$work/cpack.log" 2>&1; then
  echo "FAIL: cpack -G DEB:"
  sed 's/^/  | /' "$work/cpack.log"
  exit 1
fi
debs=("$work"/out/durable_*.deb)
[[ -e ${debs[0]} ]] || { echo "FAIL: cpack made no durable_*.deb"; ls "$work/out"; exit 1; }
deb=${debs[0]}
echo "deb: $(basename "$deb") made ($((SECONDS - started))s)"

dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's,^\./,/,' >"$work/files"
has() { grep -qxF "$1" "$work/files" || { echo "FAIL: $1 is not in the package"; fail=1; }; }

# ---- /usr/share/doc/durable --------------------------------------------------
doc=/usr/share/doc/durable
for f in README.md copyright changelog.gz lua/README.md; do has "$doc/$f"; done
for f in "$src"/doc/*.md; do has "$doc/doc/$(basename "$f")"; done
while IFS= read -r -d '' f; do
  has "$doc/examples/${f#"$src/examples/"}"
done < <(find "$src/examples" -type f ! -path '*/build/*' ! -path '*/build-*/*' \
  ! -name '*.db*' -print0)
# the manual page: compressed, and naming where the documentation is
has /usr/share/man/man1/durable.1.gz
has /usr/bin/durable
has /usr/lib/lua/5.4/durable/core.so

mkdir -p "$work/root" "$work/control"
dpkg-deb -x "$deb" "$work/root"
dpkg-deb -e "$deb" "$work/control"
man=$work/root/usr/share/man/man1/durable.1.gz
if [[ -e $man ]] && ! zcat "$man" | grep -qF "$doc"; then
  echo "FAIL: the manual page does not name $doc"
  fail=1
fi
# the copyright: Debian's machine-readable format, LICENSE's terms word for word
copyright=$work/root$doc/copyright
if [[ -e $copyright ]]; then
  head -n 1 "$copyright" |
    grep -qxF 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' ||
    { echo "FAIL: the copyright file does not start with the copyright-format 1.0 Format: line"; fail=1; }
  grep -qxF 'License: Expat' "$copyright" ||
    { echo "FAIL: the copyright file names no License: Expat"; fail=1; }
  holder=$(sed -n 's/^Copyright (c) //p' "$src/LICENSE")
  grep -qxF "Copyright: $holder" "$copyright" ||
    { echo "FAIL: the copyright file does not say 'Copyright: $holder' (LICENSE does)"; fail=1; }
  words() { tr ' ' '\n' | grep -v '^\.\?$'; }
  if ! diff <(sed -n '/^Permission is hereby granted/,$p' "$src/LICENSE" | words) \
    <(sed -n '/^ Permission is hereby granted/,$p' "$copyright" | words) >/dev/null; then
    echo "FAIL: the copyright file's licence is not LICENSE's text"
    fail=1
  fi
fi
if [[ -e $work/root$doc/changelog.gz ]]; then
  version=$(dpkg-deb -f "$deb" Version)
  zcat "$work/root$doc/changelog.gz" | head -n 1 | grep -qF "durable ($version)" ||
    { echo "FAIL: changelog.gz does not start with the entry of durable ($version)"; fail=1; }
fi
# the library: declared (shlibs), and ldconfig run by a trigger
grep -q '^libdurable 0 durable' "$work/control/shlibs" 2>/dev/null ||
  { echo "FAIL: the package's shlibs does not declare libdurable.so.0"; fail=1; }
grep -qx 'activate-noawait ldconfig' "$work/control/triggers" 2>/dev/null ||
  { echo "FAIL: the package has no ldconfig trigger"; fail=1; }
[[ -e $(echo "$work"/out/durable-dbgsym_*.ddeb) ]] ||
  { echo "FAIL: no durable-dbgsym_*.ddeb beside the package"; fail=1; }

# ---- lintian -----------------------------------------------------------------
if command -v lintian >/dev/null; then
  # (as root it says so on stderr; that is not a finding)
  # (exit 1: it found errors, counted below; more: it did not run through)
  lintian --no-cfg "$deb" >"$work/lintian.txt" 2>"$work/lintian.err"
  status=$?
  if ((status > 1)); then
    echo "FAIL: lintian did not run through (exit $status):"
    sed 's/^/  | /' "$work/lintian.err"
    fail=1
  fi
  errors=$(grep -c '^E: ' "$work/lintian.txt")
  warnings=$(grep -c '^W: ' "$work/lintian.txt")
  if ((errors)); then
    echo "FAIL: lintian reports $errors error(s):"
    sed 's/^/  | /' "$work/lintian.txt"
    fail=1
  else
    echo "lintian: no error, $warnings warning(s)"
    sed 's/^/  | /' "$work/lintian.txt"
  fi
  if grep -v 'running with root privileges' "$work/lintian.err" | grep -q .; then
    echo "lintian said on stderr:"
    sed 's/^/  | /' "$work/lintian.err"
  fi
else
  echo "lintian: not installed, not run (apt-get install lintian)"
fi
((fail)) || echo "deb: ok"
exit "$fail"
