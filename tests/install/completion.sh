#!/usr/bin/env bash
# completion.sh: the bash completion of durable completes what durable has.
#
#   bash tests/install/completion.sh COMPLETION_FILE PREFIX_BIN_DIR
#
# Sources the completion (with bash-completion's own functions when they are
# installed, and without), completes a few command lines against the durable
# in PREFIX_BIN_DIR -- an installed one, with its plugins beside it -- and
# checks the candidates: every command of `durable --help`, a command's own
# options, installed plugins by name.
set -uo pipefail
completion=$1 bindir=$2
fail=0
export PATH="$bindir:$PATH"

# complete WORDS...: the candidates for the last word, one per line
complete_line() {
  COMP_WORDS=("$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMP_LINE="$*"
  COMP_POINT=${#COMP_LINE}
  COMPREPLY=()
  _durable durable "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
  printf '%s\n' "${COMPREPLY[@]}"
}

expect() { # expect WORD WORDS...: WORD is among the candidates
  local want=$1
  shift
  local offered
  offered=$(complete_line "$@")
  if ! grep -qxF -- "$want" <<<"$offered"; then
    echo "FAIL ($mode): '$*<TAB>' does not offer '$want' (offers: $(tr '\n' ' ' <<<"$offered"))"
    fail=1
  fi
}

check() {
  local name
  for name in $(durable --help | awk '/^Commands:$/ { on = 1; next } on && /^$/ { exit }
                                     on && /^  [a-z]/ { print $1 }'); do
    expect "$name" durable "${name:0:2}"
  done
  expect publish durable --store sqlite:x.db pub
  expect --follow durable read NS KEY --f
  expect --id durable publish --
  expect --store durable get --s
  expect --version durable --v
  expect document_log durable run doc
  expect sqlite::memory: durable --store sqlite
}

mode="without bash-completion"
# shellcheck source=/dev/null
source "$completion"
check
if [[ -r /usr/share/bash-completion/bash_completion ]]; then
  mode="with bash-completion"
  # shellcheck source=/dev/null
  source /usr/share/bash-completion/bash_completion
  # shellcheck source=/dev/null
  source "$completion"
  check
fi
((fail)) || echo "completion: ok"
exit "$fail"
