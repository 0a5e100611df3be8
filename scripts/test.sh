#!/usr/bin/env bash
# The test command: set-up, ruff and the import contracts, then mypy, makemigrations --check and
# pytest on PostgreSQL + Redis (the whole suite in two lanes side by side, below).
source "$(dirname "$0")/lib.sh"
"$ROOT/scripts/setup.sh" --test
cd "$ROOT"
export HF_HUB_DISABLE_UPDATE_CHECK=1 HF_HUB_OFFLINE=0 SHARDBOARD_VAR_DIR="$VAR/test"
mkdir -p "$SHARDBOARD_VAR_DIR"

# Redis on a private port so a developer's own Redis is never flushed by the tests.
export REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6395/0}"
ensure_redis "$REDIS_URL"
source "$ROOT/scripts/postgres.sh"
export DATABASE_URL="${TEST_DATABASE_URL:-$(ensure_postgres)}"

say "ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
say "import contracts (lint-imports)"
"$VENV/bin/lint-imports"
# The ten slowest tests close every run: where CI's time goes, seen on each run.
if [ $# -gt 0 ]; then  # a developer's focused run: everything in order, then pytest on its own
  say "mypy (strict, every app)"
  "$VENV/bin/mypy"
  say "makemigrations --check"
  "$PY" manage.py makemigrations --check --dry-run
  say "pytest $*"
  exec "$VENV/bin/pytest" --durations=10 "$@"
fi

# The whole suite runs in two lanes side by side (issue 37; docs/performance.md has the
# figures). The tests that start host workers and engines take most of the time, one after
# another as before, and leave a core idle while an engine or a browser is waited on; mypy,
# the migrations check and the rest of the tests run beside them. Each lane has its own Redis
# server, database and var dir, so neither sees the other's queues, rows or engines.
rest_var="$VAR/test-rest"
rest_log="$rest_var/lane.log"
mkdir -p "$rest_var"
rest_redis="${TEST_REST_REDIS_URL:-redis://127.0.0.1:6396/0}"
ensure_redis "$rest_redis"
rest_lane() {
  say "mypy (strict, every app)"
  "$VENV/bin/mypy"
  say "makemigrations --check"
  "$PY" manage.py makemigrations --check --dry-run
  say "pytest, all but the engine tests"
  SHARDBOARD_VAR_DIR="$rest_var" REDIS_URL="$rest_redis" \
    DATABASE_URL="${DATABASE_URL%/*}/shardboard_rest" \
    "$VENV/bin/pytest" --part=rest --durations=10 --junitxml="$rest_var/junit.xml"
}
say "mypy, makemigrations --check and all but the engine tests, beside them (log: $rest_log)"
set -m  # the lane in a process group of its own, so that all of it can be stopped at once
rest_lane </dev/null >"$rest_log" 2>&1 &
rest_pid=$!
set +m
trap 'kill -- -"$rest_pid" 2>/dev/null || true' EXIT  # a stopped `make test` leaves no lane behind
say "pytest, the tests that start host workers and engines"
engines_rc=0
"$VENV/bin/pytest" --part=engines --durations=10 --junitxml="$SHARDBOARD_VAR_DIR/junit.xml" \
  || engines_rc=$?
rest_rc=0
wait "$rest_pid" || rest_rc=$?
trap - EXIT
say "The lane beside the engine tests: mypy, makemigrations --check, pytest"
cat "$rest_log"
say "engine tests: exit $engines_rc; mypy, migrations and the other tests: exit $rest_rc"
[ "$engines_rc" = 0 ] && [ "$rest_rc" = 0 ]
