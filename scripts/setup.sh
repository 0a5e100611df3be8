#!/usr/bin/env bash
# Set up the project on a fresh machine: .venv, the project and its extras. Re-runs are quick.
#   scripts/setup.sh            # what `make run` needs (web, worker, CPU engine)
#   scripts/setup.sh --test     # plus the test tools and Debian's chromium
source "$(dirname "$0")/lib.sh"
extras="engine-cpu"
[ "${1:-}" = "--test" ] && extras="engine-cpu,dev"

if [ ! -x "$PY" ]; then
  say "Creating $VENV"
  "$(pick_python)" -m venv "$VENV" || die "could not create a virtual environment (apt-get install python3-venv?)"
fi
stamp="$VAR/.installed-$(cat "$ROOT/pyproject.toml" | sha1sum | cut -c1-12)-$extras"
if [ ! -f "$stamp" ]; then
  say "Installing Shardboard with extras [$extras] into .venv"
  "$PY" -m pip install -q --upgrade pip
  # torch==2.13.0 is the CPU build; the pin keeps pip from pulling a multi-GB CUDA build.
  "$PY" -m pip install -q -e "$ROOT[$extras]"
  rm -f "$VAR"/.installed-*; touch "$stamp"
fi
if [ "${1:-}" = "--test" ] && [ ! -x /usr/bin/chromium ]; then
  say "Installing Debian's chromium for the browser tests"
  apt_install chromium
fi
# llama-server for the llama.cpp engine: built once per llama.cpp version and CPU, then cached
# (scripts/llama.sh; SHARDBOARD_LLAMA_SERVER_BIN names your own). SHARDBOARD_LLAMA=skip: none.
if [ "${SHARDBOARD_LLAMA:-build}" != skip ]; then
  if [ "${1:-}" = "--test" ]; then
    "$ROOT/scripts/llama.sh"  # the real-engine tests run against it in CI
  else
    "$ROOT/scripts/llama.sh" || say "llama-server was not built: the llama.cpp engine is unavailable"
  fi
fi
