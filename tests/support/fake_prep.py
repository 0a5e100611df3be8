"""Engine scripts that prepare nothing, for a host worker's SHARDBOARD_ENGINE_SCRIPTS_DIR.

A real llama-server build takes 6-8 minutes: these speak the real scripts' contract instead
(``--path`` prints an executable or ends 1; a preparation prints ``==>`` steps and ``[ 45%]`` or
``[k/N]`` progress, ``shardboard: why`` when it fails) and are driven by the test through files in
their folder: a preparation stops at its gate until the test opens it, and fails while the
test says it should. Once prepared, ``--path`` prints the real executable the test named, so
the launch that waited runs the real engine.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from deployments.host.enginebins import SCRIPTS

# Bounded: a gate the test never opens ends the script (failed) instead of hanging the worker.
GATE_WAIT_S = 100

_SCRIPT = """#!/usr/bin/env bash
here={here}
if [ "${{1:-}}" = --path ]; then
  [ -f "$here/{engine}.ready" ] && cat "$here/{engine}.ready" && exit 0
  exit 1
fi
printf '\\033[1m==> %s\\033[0m\\n' "{first_step}"
echo "  {progress}"
echo "compiling something/file.cpp"
echo "attempt" >>"$here/{engine}.attempts"
if [ -f "$here/{engine}.fail" ]; then
  echo "shardboard: $(cat "$here/{engine}.fail")" >&2
  exit 1
fi
for _ in $(seq {gate_ticks}); do [ -f "$here/{engine}.go" ] && break; sleep 0.1; done
[ -f "$here/{engine}.go" ] || {{ echo "shardboard: the test never opened the gate" >&2; exit 1; }}
echo "  {done_progress}"
echo {executable} >"$here/{engine}.ready"
printf '\\033[1m==> %s\\033[0m\\n' "{engine}: {executable}"
"""

_PROGRESS = {
    "llamacpp": ("Building llama-server (fake)", "[ 45%] llama-server", "[100%] llama-server"),
    "vllm": ("Installing its 146 pinned requirements (fake)", "[12/146] numpy", "[146/146] vllm"),
    "transformers": ("Installing the transformers engine (fake)", "[3/?] torch", "[26/?] rich"),
}


@dataclass(frozen=True)
class FakeScripts:
    """The folder of fake scripts; each engine's controls are files in it."""

    folder: Path

    def ready(self, engine: str, executable: str | Path) -> None:
        """`engine` counts as prepared from the start, at `executable`."""
        (self.folder / f"{engine}.ready").write_text(f"{executable}\n")

    def open_gate(self, engine: str) -> None:
        (self.folder / f"{engine}.go").touch()

    def fail_with(self, engine: str, reason: str | None) -> None:
        path = self.folder / f"{engine}.fail"
        if reason is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(reason)

    def attempts(self, engine: str) -> int:
        path = self.folder / f"{engine}.attempts"
        return len(path.read_text().splitlines()) if path.is_file() else 0


def fake_scripts(folder: Path, executables: dict[str, str | Path]) -> FakeScripts:
    """One fake script per engine in `folder`; once prepared, each prints its `executables`."""
    folder.mkdir(parents=True, exist_ok=True)
    for engine, name in SCRIPTS.items():
        first, progress, done = _PROGRESS[engine]
        exe = shlex.quote(str(executables.get(engine, "/nonexistent/engine")))
        text = _SCRIPT.format(
            here=shlex.quote(str(folder)),
            engine=engine,
            first_step=first,
            progress=progress,
            done_progress=done,
            gate_ticks=GATE_WAIT_S * 10,
            executable=exe,
        )
        script = folder / name
        script.write_text(text)
        script.chmod(0o755)
    return FakeScripts(folder)
