# Sourced by test.sh: ensure_postgres prints a DATABASE_URL of a PostgreSQL that answers,
# starting Debian's PostgreSQL (a private cluster under var/) when none is reachable.
PG_PORT="${SHARDBOARD_PG_PORT:-54329}"
PG_DIR="$VAR/pg"

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/pg_ctl" ] && { echo "$d"; return; }; done
  return 1
}

ensure_postgres() {
  local url="postgres://shardboard:shardboard@127.0.0.1:$PG_PORT/shardboard" bin
  if "$PY" -c 'import psycopg, sys; psycopg.connect(sys.argv[1], connect_timeout=2).close()' "$url" 2>/dev/null; then
    echo "$url"; return
  fi
  bin="$(pg_bin)" || { say "Installing Debian's PostgreSQL" >&2; apt_install postgresql >&2; bin="$(pg_bin)"; }
  local run=(); is_root && run=(runuser -u postgres --)
  if [ ! -f "$PG_DIR/PG_VERSION" ]; then
    say "Creating a PostgreSQL cluster in $PG_DIR" >&2
    mkdir -p "$PG_DIR"; is_root && chown postgres "$PG_DIR"
    "${run[@]}" "$bin/initdb" -D "$PG_DIR" -U postgres -A trust --no-sync >/dev/null
  fi
  mkdir -p "$VAR/pgsock"; is_root && chown postgres "$VAR/pgsock"
  "${run[@]}" "$bin/pg_ctl" -D "$PG_DIR" -l "$PG_DIR/server.log" -w -o "-p $PG_PORT -k $VAR/pgsock -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >&2 \
    || die "PostgreSQL did not start; see $PG_DIR/server.log"
  "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -qtAc "SELECT 1 FROM pg_roles WHERE rolname='shardboard'" | grep -q 1 \
    || "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE ROLE shardboard LOGIN SUPERUSER PASSWORD 'shardboard'" >&2
  "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -qtAc "SELECT 1 FROM pg_database WHERE datname='shardboard'" | grep -q 1 \
    || "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE DATABASE shardboard OWNER shardboard" >&2
  echo "$url"
}
