# Shared helpers for scripts/setup.sh, run.sh and test.sh. Sourced, not run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VAR="${SHARDBOARD_VAR_DIR:-$ROOT/var}"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
mkdir -p "$VAR"

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'shardboard: %s\n' "$*" >&2; exit 1; }

# Every prepared engine (the vLLM environment, the llama-server build), by version and CPU.
engine_cache() { echo "${SHARDBOARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shardboard}"; }

# hold_lock FILE WHAT : one preparation of WHAT at a time per engine cache (`make test`, `make run`
# and host workers may all ask at once); one that waits says so, then finds the work done.
hold_lock() {
  mkdir -p "$(dirname "$1")"
  exec 9>"$1"
  flock -n 9 || { say "Waiting for another preparation of $2 to finish (lock $1)"; flock 9; }
}

is_root() { [ "$(id -u)" = 0 ]; }

apt_install() {  # apt_install PKG... : Debian packages, only as root
  is_root || die "missing Debian packages: $*. Install them (sudo apt-get install $*) and run again."
  if [ ! -f "$VAR/.apt-updated" ]; then
    apt-get update -qq && touch "$VAR/.apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

pick_python() {
  for candidate in python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 14))'; then
      echo "$candidate"; return
    fi
  done
  die "Python 3.11 to 3.13 is needed (with venv); none found on PATH."
}

# url_part URL FIELD : host or port of a redis:// or postgres:// URL
url_part() { "$PY" -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print({"host": p.hostname or "127.0.0.1", "port": p.port or int(sys.argv[3])}[sys.argv[2]])' "$1" "$2" "${3:-6379}"; }

redis_answers() { "$PY" -c 'import redis, sys; redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()' "$1" >/dev/null 2>&1; }

ensure_redis() {  # ensure_redis URL : a Redis server answers there, started under var/ if need be
  local url="$1" host port
  redis_answers "$url" && return 0
  host="$(url_part "$url" host)"; port="$(url_part "$url" port 6379)"
  case "$host" in 127.*|localhost|::1) ;; *) die "Redis at $url does not answer; start it or fix REDIS_URL.";; esac
  command -v redis-server >/dev/null 2>&1 || { say "Installing Debian's redis-server"; apt_install redis-server; }
  say "Starting redis-server on $host:$port (data in $VAR/redis)"
  mkdir -p "$VAR/redis"
  redis-server --bind "$host" --port "$port" --dir "$VAR/redis" --save "" --appendonly no \
    --daemonize yes --pidfile "$VAR/redis/redis-$port.pid" --logfile "$VAR/redis/redis-$port.log"
  for _ in $(seq 50); do redis_answers "$url" && return 0; sleep 0.1; done
  die "redis-server did not answer on $host:$port; see $VAR/redis/redis-$port.log"
}
