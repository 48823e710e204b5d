#!/usr/bin/env bash
# Two bub gateway replicas on one PostgreSQL database, on this machine.
#
#   examples/replicas/two-replicas.sh            # a throwaway PostgreSQL in ./replicas-demo, two replicas
#   BUB_DATABASE_URL=postgres://u:p@host/db examples/replicas/two-replicas.sh   # your own database
#
# Replica 1 listens on 127.0.0.1:8081, replica 2 on 127.0.0.1:8082 (put a load
# balancer in front, or send to either: a chat's turns run in order on the
# replica that holds its session, whichever receives). Both share one
# workspaces folder, as one shared volume would be mounted in production, so a
# session that moves keeps its files. Ctrl-C stops everything.
#
# Needs PostgreSQL's server binaries for the throwaway database (Debian:
# apt-get install postgresql-15; BUB_PG_BINDIR names their folder if
# pg_config is not on PATH). BUB_BIN: the bub binary to run (default: a
# release build, made first).
set -euo pipefail
cd "$(dirname "$0")/../.."
demo="${BUB_DEMO_DIR:-$PWD/replicas-demo}"
mkdir -p "$demo"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${pg_data:-}" ]; then as_pg "$bindir/pg_ctl" -D "$pg_data" -m fast stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT INT TERM

if [ -z "${BUB_BIN:-}" ]; then
  cargo build --release --bin bub
  BUB_BIN="$PWD/target/release/bub"
fi

if [ -z "${BUB_DATABASE_URL:-}" ]; then
  bindir="${BUB_PG_BINDIR:-$(pg_config --bindir 2>/dev/null || true)}"
  if [ ! -x "$bindir/initdb" ]; then
    echo "PostgreSQL's server binaries are needed (apt-get install postgresql-15), or set BUB_DATABASE_URL" >&2
    exit 1
  fi
  # initdb refuses root: the cluster runs as the package's postgres user then.
  as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
  pg_data="$demo/pg"
  if [ ! -d "$pg_data" ]; then
    mkdir -p "$pg_data"
    [ "$(id -u)" = 0 ] && chown postgres "$pg_data" "$demo"
    as_pg "$bindir/initdb" -D "$pg_data" -U bub --auth=trust >/dev/null
  fi
  as_pg "$bindir/pg_ctl" -D "$pg_data" -l "$pg_data/server.log" -o "-p 55432 -k /tmp -c listen_addresses=127.0.0.1" -w start >/dev/null
  export BUB_DATABASE_URL="postgres://bub@127.0.0.1:55432/postgres"
  echo "PostgreSQL on 127.0.0.1:55432 (data in $pg_data)"
fi

export BUB_WEBHOOK_SECRET="${BUB_WEBHOOK_SECRET:-replicas-demo-secret}"
mkdir -p "$demo/workspaces"
"$BUB_BIN" db migrate
for n in 1 2; do
  home="$demo/replica-$n"
  mkdir -p "$home"
  # One shared volume for the workspaces (here: one folder).
  [ -e "$home/workspaces" ] || ln -s "$demo/workspaces" "$home/workspaces"
  BUB_HOME="$home" "$BUB_BIN" gateway --listen "127.0.0.1:808$n" 2> >(sed -u "s/^/[replica $n] /" >&2) &
  pids+=($!)
done
echo "replicas on http://127.0.0.1:8081 and http://127.0.0.1:8082 (webhook secret: $BUB_WEBHOOK_SECRET); Ctrl-C stops"
wait
