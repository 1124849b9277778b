#!/usr/bin/env bash
# commands.sh: the part of durable(1) that help2man cannot see by itself --
# every command's own --help -- written as a help2man include file.
#
#   bash doc/commands.sh build/durable > build/doc/commands.h2m
#
# The commands are read from `durable --help` (the lines under "Commands:"),
# so a command added to the table is in the next build's manual page with
# nothing else to edit.  Each becomes a subsection: its usage line, its
# summary, and its help text kept line for line (.nf), escaped for roff.
set -euo pipefail
durable=$1

# roff escaping: backslashes, and a line that begins with . or ' is text.
escape() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" -e 's/-/\\-/g'; }

commands=$("$durable" --help | awk '/^Commands:$/ { on = 1; next }
  on && /^$/ { exit }
  on && /^  [a-z]/ { print $1 }')
[[ -n $commands ]] || { echo "commands.sh: no commands in '$durable --help'" >&2; exit 1; }

echo "[COMMANDS]"
for name in $commands; do
  help=$("$durable" "$name" --help)
  usage=$(sed -n '1s/^usage: //p' <<<"$help")
  echo ".SS \"$name\""
  echo ".B $(escape <<<"$usage")"
  echo ".PP"
  echo ".nf"
  sed '1d' <<<"$help" | sed '/./,$!d' | escape
  echo ".fi"
done

cat <<'EOS'
[FILES]
.TP
.I durable.db
the default store, sqlite:durable.db, in the current folder; beside it
.I durable.db\-live
(the liveness locks) and SQLite's
.I \-wal
and
.I \-shm
.TP
.I /usr/share/durable/plugins
the installed plugins (document_log, document_parts), found by name by
.B durable run
.TP
.I /usr/share/lua/5.4/durable
the Lua half of the module;
.I /usr/lib/lua/5.4/durable/core.so
its C half
.TP
.I /usr/share/doc/durable
the documentation: README.md, the pages under doc/ (doc/README.md lists
them), lua/README.md, the examples under examples/, and the copyright
[SEE ALSO]
/usr/share/doc/durable/README.md and /usr/share/doc/durable/doc/ (README.md
and doc/ in durable's source tree; PREFIX/share/doc/durable after
.BR "cmake \-\-install" ),
and
.BR pkg\-config (1)
.B \-\-cflags \-\-libs durable
for libdurable.
EOS
