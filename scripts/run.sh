#!/usr/bin/env bash
# The embedded default: SQLite, a local Redis, the web server on :8000 and one host worker.
source "$(dirname "$0")/lib.sh"
"$ROOT/scripts/setup.sh"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
export HF_HUB_DISABLE_UPDATE_CHECK=1
cd "$ROOT"
"$PY" manage.py check >/dev/null  # bad settings stop here, in one line
ensure_redis "$REDIS_URL"
say "Migrating the database"
"$PY" manage.py migrate --noinput -v0
"$PY" manage.py ensure_admin
"$PY" manage.py demo_model

pids=()
stop_all() {
  trap - INT TERM EXIT
  say "Stopping"
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_all INT TERM EXIT

# Ctrl-C ends the engines too (a GPU host's worker, started on its own, leaves them serving).
SHARDBOARD_STOP_ENGINES_ON_EXIT=1 "$PY" manage.py hostworker --loglevel WARNING & pids+=($!)
"$PY" -m controlpanel.webserver & pids+=($!)  # uvicorn; SHARDBOARD_BIND, _PORT, _WEB_WORKERS
say "Shardboard is at http://${SHARDBOARD_BIND:-127.0.0.1}:${SHARDBOARD_PORT:-8000}/  (Ctrl-C stops everything)"
wait -n "${pids[@]}" || true
