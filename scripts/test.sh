#!/usr/bin/env bash
# The test command: set-up, then ruff, the import contracts, mypy, makemigrations --check and
# pytest on PostgreSQL + Redis.
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
say "mypy (strict, every app)"
"$VENV/bin/mypy"
say "makemigrations --check"
"$PY" manage.py makemigrations --check --dry-run
say "pytest"
# The ten slowest tests close every run: where CI's time goes, seen on each run.
"$VENV/bin/pytest" --durations=10 "$@"
