#!/usr/bin/env bash
# Set up the project on a fresh machine: .venv and the project. Re-runs are quick.
#   scripts/setup.sh            # what `make run` needs before its page answers: the web server,
#                               # the worker (the engines come after, in the background)
#   scripts/setup.sh --test     # plus every engine, the test tools and Debian's chromium
source "$(dirname "$0")/lib.sh"
extras=""
[ "${1:-}" = "--test" ] && extras="engine-cpu,dev"

if [ ! -x "$PY" ]; then
  say "Creating $VENV"
  "$(pick_python)" -m venv "$VENV" || die "could not create a virtual environment (apt-get install python3-venv?)"
fi
hash="$(sha1sum <"$ROOT/pyproject.toml" | cut -c1-12)"
stamp="$VAR/.installed-$hash-${extras:-base}"
# Any install of this pyproject.toml holds what `make run` needs; the test set needs its own.
have=("$VAR"/.installed-"$hash"-*)
if [ ! -f "$stamp" ] && { [ -n "$extras" ] || [ ! -f "${have[0]}" ]; }; then
  say "Installing Shardboard${extras:+ with extras [$extras]} into .venv"
  "$PY" -m pip install -q --upgrade pip
  # torch==2.13.0 (engine-cpu) is the CPU build; the pin keeps pip from pulling a CUDA build.
  # --no-compile: a module is compiled when first imported, not all 5,200 of them now (half
  # the install's CPU time: 14 s of 31 s measured, before the page can answer).
  "$PY" -m pip install -q --no-compile -e "$ROOT${extras:+[$extras]}"
  find "$VAR" -maxdepth 1 -name '.installed-*' ! -name ".installed-$hash-*" -delete
  touch "$stamp"
fi
if [ "${1:-}" = "--test" ] && [ ! -x /usr/bin/chromium ]; then
  say "Installing Debian's chromium for the browser tests"
  apt_install chromium
fi
# The engines, each prepared once per version (and CPU) into the engine cache (SHARDBOARD_CACHE_DIR):
# vLLM's CPU build (scripts/vllm.sh; SHARDBOARD_VLLM_BIN names your own) and a CPU llama-server
# (scripts/llama.sh; SHARDBOARD_LLAMA_SERVER_BIN; SHARDBOARD_LLAMA=skip: none). `make run` leaves
# them to its host worker, which prepares them in the background and shows how far it got.
if [ "${1:-}" = "--test" ]; then
  # The real-engine tests run against both. The install waits on the network and the disk, the
  # build on the CPU: side by side they take about as long as the build alone.
  started=$SECONDS
  "$ROOT/scripts/vllm.sh" >"$VAR/vllm-setup.log" 2>&1 &
  vllm_pid=$!
  [ "${SHARDBOARD_LLAMA:-build}" != skip ] && "$ROOT/scripts/llama.sh"
  wait "$vllm_pid" || { tail -20 "$VAR/vllm-setup.log" >&2; die "installing vLLM failed (log: $VAR/vllm-setup.log)"; }
  tail -1 "$VAR/vllm-setup.log"
  say "Engines prepared in $((SECONDS - started)) s"
fi
