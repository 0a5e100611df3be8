#!/usr/bin/env bash
# The transformers engine (`transformers serve`), and what the demo model is generated with: the
# project's engine-cpu extra (torch's CPU build, transformers[serving], tokenizers) in .venv.
#   scripts/transformers.sh            # install the extra if it is missing or not the pinned one
#   scripts/transformers.sh --path     # print the `transformers` executable (nothing and rc 1 when
#                                      # the extra is not installed as pyproject.toml pins it)
# SHARDBOARD_TRANSFORMERS_BIN names one of your own; then nothing is installed.
#
# `make run` answers before this is done: the extra is 1.2 GB (torch) and about two minutes of
# pip, so the host worker installs it in the background (deployments/host/prepare) beside the
# other engines. pip's "Collecting" lines are the progress: "  [12/?] torch" (pip knows the
# number of packages only once it has resolved them all: then "Installing 26 packages").
source "$(dirname "$0")/lib.sh"
BIN="$VENV/bin/transformers"

# Every requirement of the extra installed at its pinned version (a local label such as +cpu
# aside): a venv made by an older pyproject.toml is installed again.
pinned() {
  "$PY" - "$ROOT/pyproject.toml" <<'EOF'
import importlib.metadata as meta, re, sys, tomllib
extra = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["engine-cpu"]
for requirement in extra:
    name, version = re.match(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^;\s]+)", requirement).groups()
    if meta.version(name).split("+")[0] != version:
        sys.exit(1)
EOF
}

transformers_path() {
  if [ -n "${SHARDBOARD_TRANSFORMERS_BIN:-}" ]; then
    command -v "$SHARDBOARD_TRANSFORMERS_BIN" 2>/dev/null || return 1
  elif [ -x "$BIN" ] && pinned >/dev/null 2>&1; then
    echo "$BIN"
  else
    return 1
  fi
}

if [ "${1:-}" = "--path" ]; then
  transformers_path
  exit
fi

[ -x "$PY" ] || die "$VENV is missing: run scripts/setup.sh first"
hold_lock "$VAR/.transformers.lock" "the transformers engine"
if ! transformers_path >/dev/null; then
  [ -n "${SHARDBOARD_TRANSFORMERS_BIN:-}" ] && die "SHARDBOARD_TRANSFORMERS_BIN=$SHARDBOARD_TRANSFORMERS_BIN is not an executable"
  started=$SECONDS
  say "Installing the transformers engine (the engine-cpu extra: torch's CPU build, transformers; about 1.2 GB)"
  log="$VAR/transformers-install.log"
  # torch==2.13.0 is the CPU build; the pin keeps pip from pulling a multi-GB CUDA build.
  "$PY" -m pip install --progress-bar off -e "$ROOT[engine-cpu]" 2>&1 | tee "$log" |
    awk '/^Collecting /{ n++; name = $2; sub(/[[=<>!~;].*/, "", name); printf "  [%d/?] %s\n", n, name; fflush() }
         /^Installing collected packages: /{ total = split(substr($0, 32), names, ", "); printf "==> Installing %d packages (torch takes the longest)\n", total; fflush() }' ||
    { tail -10 "$log" >&2; die "installing the engine-cpu extra failed (log: $log)"; }
  transformers_path >/dev/null || die "the engine-cpu extra installed, but not at the versions pyproject.toml pins (log: $log)"
  say "The transformers engine installed in $((SECONDS - started)) s"
fi
say "transformers: $(transformers_path)"
