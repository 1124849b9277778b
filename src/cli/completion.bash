# bash completion for durable: commands, options, stores and plugins.
#
# Installed as share/bash-completion/completions/durable, which
# bash-completion loads the first time `durable <TAB>` is pressed.  Nothing
# is listed here: the commands come from `durable --help` and a command's
# options from `durable COMMAND --help`, asked of the very `durable` being
# completed, so the completion never falls behind the command (and knows no
# NodeType or stream: those are the store's, not the command's).  `durable
# run` completes Lua files and the names of the installed plugins.
# (lua/durable/completion.lua is something else: the runtime's completions,
# values that arrive later.)

_durable_commands() {
  "$1" --help 2>/dev/null | awk '/^Commands:$/ { on = 1; next }
    on && /^$/ { exit }
    on && /^  [a-z]/ { print $1 }'
}

_durable_options() { # _durable_options DURABLE COMMAND
  "$1" "$2" --help 2>/dev/null | grep -oE -- '--[a-z][a-z-]*' | sort -u
}

# The plugins installed beside this durable (BINDIR/../share/durable/plugins).
_durable_plugins() {
  local bin dir f
  bin=$(type -P "$1") || return
  dir=${bin%/*}/../share/durable/plugins
  for f in "$dir"/*.lua; do
    [[ -e $f ]] || continue
    f=${f##*/}
    echo "${f%.lua}"
  done
}

_durable() {
  local cur prev words cword
  if declare -F _init_completion >/dev/null; then
    _init_completion || return
  else # without bash-completion: the words as bash split them
    words=("${COMP_WORDS[@]}")
    cword=$COMP_CWORD
    cur=${words[cword]}
    prev=${words[cword - 1]}
  fi
  local durable=${words[0]} command= i
  for ((i = 1; i < cword; i++)); do
    case ${words[i]} in
      --store | --as) ((i++)) ;;
      -*) ;;
      *)
        command=${words[i]}
        break
        ;;
    esac
  done

  case $prev in
    --store | --read-store)
      if [[ $cur == sqlite:* ]]; then
        local file=${cur#sqlite:}
        mapfile -t COMPREPLY < <(compgen -f -- "$file" | sed 's/^/sqlite:/')
      else
        mapfile -t COMPREPLY < <(compgen -W "sqlite: sqlite::memory: postgresql://" -- "$cur")
      fi
      compopt -o nospace 2>/dev/null
      return
      ;;
    --as | --after | --to | --through | --id) return ;;
  esac

  if [[ $cur == -* ]]; then
    local options="--store --as --help"
    [[ -z $command ]] && options+=" --version"
    [[ -n $command ]] && options+=" $(_durable_options "$durable" "$command")"
    mapfile -t COMPREPLY < <(compgen -W "$options" -- "$cur" | sort -u)
    return
  fi
  case $command in
    "" | help)
      mapfile -t COMPREPLY < <(compgen -W "$(_durable_commands "$durable") help" -- "$cur")
      ;;
    run)
      mapfile -t COMPREPLY < <(compgen -W "$(_durable_plugins "$durable")" -- "$cur")
      mapfile -t -O "${#COMPREPLY[@]}" COMPREPLY < <(compgen -f -X '!*.lua' -- "$cur")
      mapfile -t -O "${#COMPREPLY[@]}" COMPREPLY < <(compgen -d -- "$cur")
      ;;
    lua)
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
      ;;
  esac
}
complete -F _durable durable
