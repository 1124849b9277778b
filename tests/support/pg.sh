# shellcheck shell=bash
# pg.sh: a private PostgreSQL for the tests (source it, do not run it).
#
# durable_pg_start makes a cluster with initdb in a fresh folder under /tmp
# and starts it listening only on a unix socket in that folder: no TCP port,
# nothing shared with a server this machine may already run (that one is never
# looked at, let alone touched).  initdb refuses root, so as root the cluster
# belongs to an unprivileged system user, durable-test, made if missing.
# fsync and synchronous_commit stay on: tests measure durability.
# DURABLE_PG_LISTEN=ADDRS (with DURABLE_PG_PORT, DURABLE_PG_CLIENTS=CIDR)
# makes it listen on TCP too, trusting that network only: the partition
# spec puts it on addresses of veth links that it made itself.
#
# After a start these are exported:
#   DURABLE_TEST_PG      libpq URL of the database `durable`
#                        (postgresql:///durable?host=DIR&user=durable)
#   DURABLE_TEST_PG_DIR  the folder (socket, data/, postgres.log)
#   DURABLE_TEST_PG_CTL  a script that runs pg_ctl on this cluster as its
#                        owner: "$DURABLE_TEST_PG_CTL" restart | stop | start
#                        (-D, -l and -w are given; add e.g. -m immediate)
#
# durable_pg_restart restarts it; durable_pg_stop stops it (fast) and removes
# the folder; both are safe to call when nothing runs.  Use durable_pg_stop in
# an EXIT trap.

DURABLE_PG_USER=${DURABLE_PG_USER:-durable-test}

# Print the newest PostgreSQL bin folder under /usr/lib/postgresql.
durable__pg_bindir() {
  local dir best=
  while read -r dir; do
    [[ -x $dir/initdb && -x $dir/pg_ctl ]] && best=$dir
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V)
  [[ -n $best ]] || return 1
  echo "$best"
}

# Run a command as the cluster's owner, from inside its folder (postgres
# complains about a working directory it cannot enter).
durable__pg_as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    (cd "$DURABLE_TEST_PG_DIR" && runuser -u "$DURABLE_PG_USER" -- "$@")
  else
    (cd "$DURABLE_TEST_PG_DIR" && "$@")
  fi
}

durable_pg_start() {
  local bindir dir
  if [[ -n ${DURABLE_TEST_PG_DIR:-} && -d ${DURABLE_TEST_PG_DIR:-} ]]; then
    echo "pg.sh: a private PostgreSQL already runs in $DURABLE_TEST_PG_DIR" >&2
    return 1
  fi
  if ! bindir=$(durable__pg_bindir); then
    echo "pg.sh: no initdb under /usr/lib/postgresql/*/bin (apt-get install postgresql)" >&2
    return 1
  fi
  # /tmp, not $TMPDIR: the owner must reach it, and a socket path is short.
  dir=$(mktemp -d /tmp/durable-pg.XXXXXXXX) || return 1
  export DURABLE_TEST_PG_DIR=$dir
  if [[ $(id -u) -eq 0 ]]; then
    if ! id -u "$DURABLE_PG_USER" >/dev/null 2>&1; then
      useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin "$DURABLE_PG_USER" || {
        durable_pg_stop
        return 1
      }
    fi
    chown "$DURABLE_PG_USER:" "$dir"
  fi
  chmod 700 "$dir"

  # initdb -N only skips syncing the new files; the server runs with fsync.
  if ! durable__pg_as_owner "$bindir/initdb" -D "$dir/data" -U durable \
    -A trust -E UTF8 --locale=C -N >"$dir/initdb.log" 2>&1; then
    echo "pg.sh: initdb failed:" >&2
    cat "$dir/initdb.log" >&2
    durable_pg_stop
    return 1
  fi
  # In the config file, not on the command line, so a restart keeps them.
  cat >>"$dir/data/postgresql.conf" <<EOF

# durable tests: a private server on a unix socket only.
listen_addresses = '${DURABLE_PG_LISTEN:-}'
port = ${DURABLE_PG_PORT:-5432}
unix_socket_directories = '$dir'
fsync = on
synchronous_commit = on
max_connections = 100
EOF
  # DURABLE_PG_LISTEN (the partition spec: addresses on veth links of its
  # own) opens TCP too, for the network DURABLE_PG_CLIENTS alone.
  if [[ -n ${DURABLE_PG_LISTEN:-} ]]; then
    echo "host all all ${DURABLE_PG_CLIENTS:?the clients network} trust" \
      >>"$dir/data/pg_hba.conf"
  fi

  cat >"$dir/pg_ctl" <<EOF
#!/bin/sh
# pg_ctl on the durable test cluster in $dir, as its owner.
cd '$dir' || exit 1
if [ "\$(id -u)" -eq 0 ]; then
  exec runuser -u '$DURABLE_PG_USER' -- '$bindir/pg_ctl' -D '$dir/data' -l '$dir/postgres.log' -w -t 60 "\$@"
fi
exec '$bindir/pg_ctl' -D '$dir/data' -l '$dir/postgres.log' -w -t 60 "\$@"
EOF
  chmod 755 "$dir/pg_ctl"
  export DURABLE_TEST_PG_CTL=$dir/pg_ctl

  if ! "$DURABLE_TEST_PG_CTL" start >/dev/null 2>&1; then
    echo "pg.sh: postgres did not start:" >&2
    tail -n 30 "$dir/postgres.log" >&2
    durable_pg_stop
    return 1
  fi
  if ! durable__pg_as_owner "$bindir/createdb" -h "$dir" -p "${DURABLE_PG_PORT:-5432}" -U durable durable \
    >"$dir/createdb.log" 2>&1; then
    echo "pg.sh: createdb failed:" >&2
    cat "$dir/createdb.log" >&2
    durable_pg_stop
    return 1
  fi
  export DURABLE_TEST_PG="postgresql:///durable?host=$dir&user=durable${DURABLE_PG_PORT:+&port=$DURABLE_PG_PORT}"
  DURABLE_TEST_PG_VERSION=${bindir#/usr/lib/postgresql/}
  export DURABLE_TEST_PG_VERSION=${DURABLE_TEST_PG_VERSION%/bin}
}

# durable_pg_standby NAME [sync|async] makes a streaming standby of the
# private server (pg_basebackup -R) in $DURABLE_TEST_PG_DIR/NAME, listening
# on a socket in that folder, and starts it.  With sync (the default) the
# primary waits for it at every commit (synchronous_standby_names =
# 'ANY 1 (NAME)').  Exported after it:
#   DURABLE_TEST_PG_STANDBY_CTL  pg_ctl on the standby, as pg_ctl above
#                                (promote, stop -m immediate, start)
#   DURABLE_TEST_PG_HA           a libpq URL that lists the primary, then
#                                the standby
#   DURABLE_TEST_PG_STANDBY      a libpq URL of the standby alone
durable_pg_standby() {
  local name=${1:?a name} mode=${2:-sync} bindir dir=${DURABLE_TEST_PG_DIR:?no private PostgreSQL}
  local sdir=$dir/$name
  bindir=$(durable__pg_bindir) || return 1
  mkdir -p "$sdir" && chmod 700 "$sdir"
  [[ $(id -u) -ne 0 ]] || chown "$DURABLE_PG_USER:" "$sdir"
  if ! durable__pg_as_owner "$bindir/pg_basebackup" -h "$dir" -p "${DURABLE_PG_PORT:-5432}" \
    -U durable -D "$sdir/data" -R -X stream -c fast >"$sdir/basebackup.log" 2>&1; then
    echo "pg.sh: pg_basebackup failed:" >&2
    cat "$sdir/basebackup.log" >&2
    return 1
  fi
  printf '%s\n' "" "# durable tests: the standby $name of the server in $dir." \
    "unix_socket_directories = '$sdir'" "cluster_name = '$name'" \
    "synchronous_standby_names = ''" >>"$sdir/data/postgresql.conf"
  sed -e "s|'$dir/data'|'$sdir/data'|" -e "s|'$dir/postgres.log'|'$sdir/postgres.log'|" \
    "$dir/pg_ctl" >"$sdir/pg_ctl"
  chmod 755 "$sdir/pg_ctl"
  export DURABLE_TEST_PG_STANDBY_CTL=$sdir/pg_ctl
  if ! "$sdir/pg_ctl" start >/dev/null 2>&1; then
    echo "pg.sh: the standby did not start:" >&2
    tail -n 30 "$sdir/postgres.log" >&2
    return 1
  fi
  if [[ $mode == sync ]]; then
    durable__pg_as_owner "$bindir/psql" -h "$dir" -p "${DURABLE_PG_PORT:-5432}" -U durable -d durable -qAt \
      -c "ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 ($name)'" \
      -c "SELECT pg_reload_conf()" >/dev/null || return 1
  fi
  export DURABLE_TEST_PG_HA="postgresql:///durable?host=$dir,$sdir&user=durable${DURABLE_PG_PORT:+&port=$DURABLE_PG_PORT}"
  export DURABLE_TEST_PG_STANDBY="postgresql:///durable?host=$sdir&user=durable${DURABLE_PG_PORT:+&port=$DURABLE_PG_PORT}"
}

durable_pg_restart() {
  [[ -n ${DURABLE_TEST_PG_CTL:-} && -x ${DURABLE_TEST_PG_CTL:-} ]] || {
    echo "pg.sh: no private PostgreSQL to restart" >&2
    return 1
  }
  "$DURABLE_TEST_PG_CTL" restart -m fast >/dev/null
}

# Stop the private server (if it runs) and remove its folder.  Touches only
# the folder made by durable_pg_start and the postmaster whose pid its data
# directory holds.
durable_pg_stop() {
  local dir=${DURABLE_TEST_PG_DIR:-} pid
  [[ -n $dir && $dir == /tmp/durable-pg.* ]] || return 0
  local standby
  for standby in "$dir"/*/pg_ctl; do # durable_pg_standby's
    [[ -f ${standby%/pg_ctl}/data/postmaster.pid ]] && "$standby" stop -m immediate >/dev/null 2>&1
  done
  if [[ -f $dir/data/postmaster.pid ]]; then
    if ! "$dir/pg_ctl" stop -m fast >/dev/null 2>&1; then
      pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)
      if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
        "$dir/pg_ctl" stop -m immediate >/dev/null 2>&1 || kill -KILL "$pid" 2>/dev/null || true
      fi
    fi
  fi
  rm -rf "$dir"
  unset DURABLE_TEST_PG DURABLE_TEST_PG_DIR DURABLE_TEST_PG_CTL DURABLE_TEST_PG_VERSION \
    DURABLE_TEST_PG_STANDBY_CTL DURABLE_TEST_PG_HA DURABLE_TEST_PG_STANDBY
}
