#!/usr/bin/env bash
# manual.sh: durable(1) is in step with the command's own help.
#
#   bash tests/install/manual.sh DURABLE PAGE
#
# Every command that `durable --help` lists must have its subsection in the
# page (.SS "NAME") with its usage line as `durable NAME --help` prints it,
# and every environment variable of `durable --help` must be in ENVIRONMENT;
# FILES and SEE ALSO must name /usr/share/doc/durable, where the
# documentation is installed.
# Commands are read from --help, so a command added later is checked too.
set -euo pipefail
durable=$1 page=$2
fail=0
[[ -s $page ]] || { echo "FAIL: no manual page at $page"; exit 1; }
# the page's text with roff's escapes undone: \- is -, \e is \
text=$(sed -e 's/\\-/-/g' -e 's/\\e/\\/g' "$page")

commands=$("$durable" --help | awk '/^Commands:$/ { on = 1; next }
  on && /^$/ { exit }
  on && /^  [a-z]/ { print $1 }')
n=0
for name in $commands; do
  n=$((n + 1))
  usage=$("$durable" "$name" --help | sed -n '1s/^usage: //p')
  if ! grep -qxF ".SS \"$name\"" <<<"$text"; then
    echo "FAIL: durable $name is not in the manual page"
    fail=1
  elif ! grep -qxF ".B $usage" <<<"$text"; then
    echo "FAIL: the page's usage of durable $name is not '$usage'"
    fail=1
  fi
done
((n > 0)) || { echo "FAIL: no commands in durable --help"; exit 1; }

env_section=$(sed -n '/^\.SH ENVIRONMENT/,/^\.SH /p' <<<"$text")
for var in $("$durable" --help | sed -n '/^Environment:$/,/^$/p' | grep -oE '^  DURABLE_[A-Z_]+'); do
  grep -qF "$var" <<<"$env_section" || { echo "FAIL: $var is not in ENVIRONMENT"; fail=1; }
done
# the installed documentation: named in FILES and in SEE ALSO
for section in FILES "SEE ALSO"; do
  sed -n "/^\.SH \"\{0,1\}$section\"\{0,1\}\$/,/^\.SH /p" <<<"$text" |
    grep -qF /usr/share/doc/durable ||
    { echo "FAIL: $section does not name /usr/share/doc/durable"; fail=1; }
done
echo "manual page: $n commands checked"
exit "$fail"
