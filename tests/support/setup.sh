#!/usr/bin/env bash
# setup.sh: make this machine able to build and test durable, then build it.
#
# For Debian 12 as root (or a user with sudo).  Installs with apt-get only the
# packages that are missing (checked with dpkg-query; `apt-get update` runs
# only when something must be installed), then configures and builds the tree
# with CMake into build/ (or $DURABLE_BUILD_DIR) on all cores.  Run it again
# and it only rebuilds what changed.
#
#   DURABLE_SANITIZE=1   configure with -DDURABLE_SANITIZE=ON (ASan + UBSan);
#   DURABLE_SANITIZE=thread  with -DDURABLE_TSAN=ON (ThreadSanitizer: the C
#                        units and the store contract; see tests/run.sh);
#   DURABLE_SANITIZE=0   configure with both OFF; unset: keep what build/ has.
#   DURABLE_BUILD_DIR    where to build (default: build/ at the top).
#
# Quiet on success (one line); on failure the output of the step that failed
# is shown.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${DURABLE_BUILD_DIR:-$root/build}

packages=(
  lua5.4 liblua5.4-dev lua-busted lua-luv
  libuv1-dev libjansson-dev libsqlite3-dev libpq-dev postgresql
  libmicrohttpd-dev curl locales
  cmake build-essential pkg-config
)

log=$(mktemp "${TMPDIR:-/tmp}/durable-setup.XXXXXX")
trap 'rm -f "$log"' EXIT

# Run a step with its output in $log; on failure show it and stop.
# One line as it starts and one as it ends (with its time), as a person
# expects of a step that may take minutes (the install, the build).
step() {
  local what=$1 started=$SECONDS
  shift
  echo "setup: $what ..."
  if ! "$@" >"$log" 2>&1; then
    echo "setup: $what failed:" >&2
    # Progress lines say nothing about the failure; the first errors do.
    grep -Ev '^\[ *[0-9]+%\] (Building|Linking|Built target)|^Scanning|^Consolidate' \
      "$log" | head -n 150 >&2 || true
    exit 1
  fi
  echo "setup: $what done ($((SECONDS - started))s)"
}

# help2man writes the manual page at build time (doc/CMakeLists.txt);
# bash-completion is what loads share/bash-completion/completions/durable;
# sqlite3 lets refusals_spec make a database that is not durable's.
packages+=(help2man bash-completion sqlite3)
# luarocks: tests/install/luarocks.sh builds durable-scm-1.rockspec with it;
# lintian: tests/install/deb.sh has it check the Debian package.
packages+=(luarocks lintian)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $status == *" installed" ]] || missing+=("$p")
done

if ((${#missing[@]})); then
  as_root=()
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null; then
      echo "setup: missing packages (${missing[*]}); run as root to install them" >&2
      exit 1
    fi
    as_root=(sudo)
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  step "apt-get update" "${as_root[@]}" apt-get -q update
  # Debian's luarocks depends on lua5.1 (through lua-any), and lua5.1 takes
  # the lua-interpreter alternative, /usr/bin/lua, in auto mode (priority 110
  # to lua5.4's 20): `lua` -- and a bare `busted`, `#!/usr/bin/env lua` --
  # would be Lua 5.1 after this install.  A choice made by hand (manual mode,
  # which no package's install changes) is kept; otherwise /usr/bin/lua is
  # set to lua5.4 after the install, and checked.
  lua_alternative() {
    update-alternatives --query lua-interpreter 2>/dev/null | sed -n "s/^$1: //p" || true
  }
  lua_chosen=
  [[ $(lua_alternative Status) == manual ]] && lua_chosen=$(lua_alternative Value)
  step "apt-get install" "${as_root[@]}" apt-get -q -y --no-install-recommends \
    install "${missing[@]}"
  lua_want=${lua_chosen:-/usr/bin/lua5.4}
  if [[ $(lua_alternative Value) != "$lua_want" && -x $lua_want ]]; then
    step "set lua to $lua_want" "${as_root[@]}" \
      update-alternatives --set lua-interpreter "$lua_want"
  fi
  if [[ -z $lua_chosen && $(/usr/bin/lua -v 2>&1) != "Lua 5.4"* ]]; then
    echo "setup: /usr/bin/lua is not Lua 5.4 after the install: $(/usr/bin/lua -v 2>&1)" \
      "(update-alternatives --set lua-interpreter /usr/bin/lua5.4)" >&2
    exit 1
  fi
fi

configure=(cmake -S "$root" -B "$build")
case ${DURABLE_SANITIZE:-} in
  1 | ON | on | yes) configure+=(-DDURABLE_SANITIZE=ON -DDURABLE_TSAN=OFF) ;;
  thread) configure+=(-DDURABLE_SANITIZE=OFF -DDURABLE_TSAN=ON) ;;
  0 | OFF | off | no) configure+=(-DDURABLE_SANITIZE=OFF -DDURABLE_TSAN=OFF) ;;
  "") ;;
  *) echo "setup: DURABLE_SANITIZE must be 1, thread or 0, not '$DURABLE_SANITIZE'" >&2; exit 2 ;;
esac

step "cmake configure" "${configure[@]}"
step "build on $(nproc) cores" cmake --build "$build" --parallel "$(nproc)"

sanitize=off
grep -qx 'DURABLE_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" && sanitize=on
grep -qx 'DURABLE_TSAN:BOOL=ON' "$build/CMakeCache.txt" && sanitize="on (thread)"
echo "build: ok (${build#"$root"/}, sanitizers $sanitize)"
