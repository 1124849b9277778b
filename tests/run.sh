#!/usr/bin/env bash
# run.sh: the whole test suite, the one command the README names.
#
#   bash tests/run.sh
#
# 1. tests/support/setup.sh: install what is missing, build into build/.
# 2. Two private PostgreSQL servers (tests/support/pg.sh), stopped on any
#    exit: one for the busted specs, which restart theirs and cut its
#    connections, one for ctest.
# 3. The busted specs under tests/spec/ with DURABLE_TEST_STORE=postgres
#    (see .busted), the longest suite, start at once; beside them, ctest:
#    the C units, the store contract suite (they read DURABLE_TEST_PG for
#    the PostgreSQL leg), the fault and house checks, the examples and the
#    install checks.
# 4. Once ctest is done, the busted specs with DURABLE_TEST_STORE=sqlite,
#    beside the postgres ones still running.  The suites share nothing (a
#    file per mesh, a database per run, a server each), and most of their
#    time is waiting.
#
# One line per suite, then one summary line; the exit status is non-zero when
# anything failed.  Each suite's full output is kept in build/test-logs/ and
# shown when it fails.  DURABLE_SANITIZE=1 builds with ASan + UBSan (CI does).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DURABLE_BUILD_DIR:-$root/build}
[[ $build == /* ]] || build=$PWD/$build
export DURABLE_BUILD_DIR=$build
cd "$root" || exit 1

passed=0
failed=0
parts=()

finish() {
  local details=${parts[0]:-nothing ran} part
  for part in "${parts[@]:1}"; do details+=", $part"; done
  local s=s
  ((passed == 1)) && s=
  echo "durable tests: $passed suite$s passed, $failed failed ($details)"
  exit $((failed > 0))
}

# record NAME OK COUNTS NOTE SECONDS LOG: count a suite and print its line;
# when it failed, show the end of its log.
record() {
  local name=$1 ok=$2 counts=$3 note=$4 seconds=$5 log=$6
  parts+=("$name $counts")
  if ((ok)); then
    passed=$((passed + 1))
    echo "$name: $counts passed$note (${seconds}s)"
  else
    failed=$((failed + 1))
    echo "$name: $counts passed$note, FAILED (${seconds}s; full log: ${log#"$root"/})"
    tail -n 200 "$log" | sed 's/^/  | /'
  fi
}

if ! bash tests/support/setup.sh; then
  failed=1
  parts+=("build failed")
  finish
fi
logs=$build/test-logs
mkdir -p "$logs"

# Each suite runs as a background job in its own process group (set -m) and
# the script waits for it: a trapped signal interrupts `wait` at once (a
# foreground child would first have to finish), and the whole job, a test's
# children included, is stopped before the private PostgreSQL is.
set -m
children=()
start_logged() { # start_logged LOG COMMAND...: started in the background; $started
  local log=$1
  shift
  "$@" >"$log" 2>&1 </dev/null &
  started=$!
  children+=("$started")
}
# A job waited for leaves the list: its process group id may be reused.
forget_child() {
  local pid kept=()
  for pid in "${children[@]}"; do
    [[ $pid == "$1" ]] || kept+=("$pid")
  done
  children=("${kept[@]}")
}
run_logged() { # run_logged LOG COMMAND...: the command's status
  start_logged "$@"
  wait "$started"
  local rc=$?
  forget_child "$started"
  return "$rc"
}
# shellcheck disable=SC2317 # called from the traps below
interrupted() {
  echo "tests/run.sh: interrupted" >&2
  local pid
  for pid in "${children[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  exit "$1"
}

# shellcheck source=tests/support/pg.sh
source tests/support/pg.sh
pg_dirs=()
stop_servers() {
  local dir
  for dir in "${pg_dirs[@]}"; do DURABLE_TEST_PG_DIR=$dir durable_pg_stop; done
}
trap 'stop_servers' EXIT
trap 'interrupted 130' INT
trap 'interrupted 143' TERM HUP

# pg_server FOR: a private server of its own, exported (DURABLE_TEST_PG...)
# for what starts next; 1 when it did not start.
pg_server() {
  unset DURABLE_TEST_PG DURABLE_TEST_PG_DIR DURABLE_TEST_PG_CTL DURABLE_TEST_PG_VERSION
  if durable_pg_start; then
    pg_dirs+=("$DURABLE_TEST_PG_DIR")
    echo "postgres: private server $DURABLE_TEST_PG_VERSION on $DURABLE_TEST_PG_DIR ($1)"
    return 0
  fi
  [[ -n ${DURABLE_TEST_PG_DIR:-} ]] && pg_dirs+=("$DURABLE_TEST_PG_DIR")
  failed=$((failed + 1))
  parts+=("postgres for $1 did not start")
  return 1
}

# ---- busted: how it runs ----
busted=(lua5.4 /usr/bin/busted)
busted_env=()
if grep -qx 'DURABLE_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  # For ctest's programs and busted alike.  GCC 12's sanitizer runtime, in
  # its __tls_get_addr interceptor, takes a thread-local block of a dlopened
  # library whose address happens to sit 16 bytes into a page for a header
  # that glibc stopped writing in 2.25, and reads a bogus range from it; the
  # leak check at exit then dies ("Tracer caught signal 11") after every test
  # has passed, about once in a few runs.  Without the interceptor those
  # blocks are still scanned: the leak check counts what the dynamic linker
  # allocates among its roots.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
  [[ $ASAN_OPTIONS == *intercept_tls_get_addr* ]] ||
    ASAN_OPTIONS+=:intercept_tls_get_addr=0
  # lua5.4 is not instrumented, and the ASan runtime must be loaded before
  # the sanitized durable.core.  ld.so --preload (not LD_PRELOAD) loads it
  # into lua5.4 alone: a psql or pg_ctl that a spec starts must not inherit
  # it (psql hangs at exit under it).
  ldso=$(readelf -l "$(readlink -f "$(command -v lua5.4)")" |
    sed -n 's/.*program interpreter: \(.*\)]$/\1/p')
  preload="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  busted=("$ldso" --preload "$preload" "$(command -v lua5.4)" /usr/bin/busted)
  # a spec that starts the stock interpreter itself starts it the same way
  busted_env+=("DURABLE_TEST_LUA=$ldso --preload '$preload' $(command -v lua5.4)")
  busted_env+=("LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/support/lsan.supp,print_suppressions=0}")
fi

# start_busted STORE: its run started (busted_pid[STORE]); finish_busted
# STORE waits for it and records it.
declare -A busted_pid busted_start
start_busted() {
  local store=$1
  echo "busted $store: running every spec under tests/spec ..."
  busted_start[$store]=$SECONDS
  start_logged "$logs/busted-$store.log" env "${busted_env[@]}" DURABLE_TEST_STORE="$store" \
    "${busted[@]}" --run="$store" -o plainTerminal
  busted_pid[$store]=$started
}
finish_busted() {
  local store=$1 log=$logs/busted-$1.log rc line ok fail err pend
  local start=${busted_start[$store]}
  wait "${busted_pid[$store]}"
  rc=$?
  forget_child "${busted_pid[$store]}"
  # "40 successes / 0 failures / 0 errors / 2 pending : 1.2 seconds"
  line=$(grep -E '^[0-9]+ success.* / [0-9]+ failure.* / [0-9]+ error.* / [0-9]+ pending' "$log" | tail -n 1)
  if [[ -z $line ]]; then
    record "busted $store" 0 "0/0" ", did not run" "$((SECONDS - start))" "$log"
    return
  fi
  read -r ok fail err pend <<<"$(echo "$line" | grep -Eo '[0-9]+' | head -n 4 | tr '\n' ' ')"
  local note=
  ((pend)) && note=", $pend pending"
  # every spec passed, yet the process failed on its way out
  ((rc != 0 && fail + err == 0)) && note+=", then exited with status $rc"
  record "busted $store" "$((rc == 0 && fail + err == 0))" "$ok/$((ok + fail + err))" \
    "$note" "$((SECONDS - start))" "$log"
}

run_specs=0
if grep -qx 'DURABLE_TSAN:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  # ThreadSanitizer must be in the executable from its start: the stock
  # lua5.4 is not, so the specs are for the other builds
  echo "busted: not run on a ThreadSanitizer build (its C units and store contract are)"
  parts+=("busted not run under TSan")
elif [[ -z $(find tests/spec -name '*_spec.lua' -print -quit 2>/dev/null) ]]; then
  echo "busted: no specs under tests/spec yet, skipped"
  parts+=("busted none")
else
  run_specs=1
fi

# ---- busted postgres, beside ctest ----
pg_busted=0
if ((run_specs)) && pg_server "busted"; then
  pg_busted=1
  start_busted postgres
elif ((run_specs)); then
  parts+=("busted postgres not run")
fi
pg_server ctest

# ---- ctest ----
log=$logs/ctest.log
start=$SECONDS
# One line as each suite starts, one as it ends (record), so a minutes-long
# run says what it is doing.
echo "ctest: running $(ctest --test-dir "$build" -N -LE failover 2>/dev/null |
  sed -n 's/^Total Tests: //p') tests (C units, store contract, fault and house checks, examples, install) ..."
# (-LE failover: the pg_auto_failover example takes minutes: `ctest -L
# failover` runs it)
run_logged "$log" ctest --test-dir "$build" --output-on-failure --timeout 600 -LE failover
rc=$?
counts=$(sed -n 's/.* \([0-9][0-9]*\) tests\{0,1\} failed out of \([0-9][0-9]*\).*/\1 \2/p' "$log" | tail -n 1)
if [[ -n $counts ]]; then
  read -r nfail total <<<"$counts"
  # ctest counts a skipped test as not failed; say it apart.
  nskip=$(grep -c '(Skipped)' "$log" || true)
  note=
  ((nskip)) && note=", $nskip skipped"
  record ctest "$((rc == 0))" "$((total - nfail - nskip))/$((total - nskip))" "$note" \
    "$((SECONDS - start))" "$log"
elif ((rc == 0)) && grep -q 'No tests were found' "$log"; then
  echo "ctest: no tests registered yet, skipped"
  parts+=("ctest none")
else
  record ctest 0 "0/0" ", did not run" "$((SECONDS - start))" "$log"
fi

# ---- busted sqlite, beside what is left of busted postgres ----
if ((run_specs)); then
  start_busted sqlite
  finish_busted sqlite
  ((pg_busted)) && finish_busted postgres
fi

finish
