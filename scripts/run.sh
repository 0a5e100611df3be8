#!/usr/bin/env bash
# The embedded default: SQLite, a local Redis, the web server on :8000 and one host worker.
# The page answers first: the engines (the transformers engine, vLLM's CPU build, llama-server)
# are prepared by the host worker in the background, their progress on the dashboard; the demo
# deployment starts on the first one ready and moves to vLLM when vLLM is (SHARDBOARD_DEMO=off:
# no demo deployment).
source "$(dirname "$0")/lib.sh"
export SHARDBOARD_RUN_STARTED="${SHARDBOARD_RUN_STARTED:-$(date +%s)}"
"$ROOT/scripts/setup.sh"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
export HF_HUB_DISABLE_UPDATE_CHECK=1
cd "$ROOT"
ensure_redis "$REDIS_URL"
say "Migrating the database"
"$PY" manage.py migrate --noinput -v0  # its system checks stop bad settings here, in one line
"$PY" manage.py ensure_admin

pids=()
helpers=()
stop_all() {
  trap - INT TERM EXIT
  say "Stopping"
  for pid in "${helpers[@]}" "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_all INT TERM EXIT

"$PY" -m controlpanel.webserver & pids+=($!)  # uvicorn; SHARDBOARD_BIND, _PORT, _WEB_WORKERS
url="http://${SHARDBOARD_BIND:-127.0.0.1}:${SHARDBOARD_PORT:-8000}/"
"$PY" - "$url" <<'EOF' || die "the web server did not answer at $url"
import sys, time, urllib.request
for _ in range(1500):  # about five minutes
    try:
        urllib.request.urlopen(sys.argv[1] + "accounts/login/", timeout=2).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
EOF
say "Shardboard is at $url, $(($(date +%s) - SHARDBOARD_RUN_STARTED)) s after the start (Ctrl-C stops everything)"
# The host worker once the page answers: the engines it prepares never slow the page's start.
# Ctrl-C ends the engines too (a GPU host's worker, started on its own, leaves them serving).
SHARDBOARD_STOP_ENGINES_ON_EXIT=1 "$PY" manage.py hostworker --loglevel WARNING & pids+=($!)
say "Engines not yet prepared are prepared in the background: progress on the dashboard"
if [ "${SHARDBOARD_DEMO:-on}" != off ]; then
  "$PY" manage.py demo_deployment & helpers+=($!)
fi
wait -n "${pids[@]}" || true
