"""Where this host's engines are: the executable each engine adapter runs.

A path named in the engine's variable wins (a GPU host's CUDA vLLM, its own llama-server);
otherwise the one the project's scripts prepared into the engine cache, as their `--path`
prints it (scripts/vllm.sh, scripts/llama.sh: the one place that knows the cache's layout);
otherwise the bare command name, looked up on PATH at spawn (a missing one is diagnosed then).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from django.conf import settings

from deployments.engines import EngineAdapter, get_adapter

SCRIPTS = {"vllm": "vllm.sh", "llamacpp": "llama.sh", "transformers": "transformers.sh"}
BIN_ENV = {
    "vllm": "SHARDBOARD_VLLM_BIN",
    "llamacpp": "SHARDBOARD_LLAMA_SERVER_BIN",
    "transformers": "SHARDBOARD_TRANSFORMERS_BIN",
}
_PATH_TIMEOUT_S = 30


def script(engine: str) -> Path:
    """The script that prepares `engine` on this host (SHARDBOARD_ENGINE_SCRIPTS_DIR)."""
    return Path(settings.SHARDBOARD_ENGINE_SCRIPTS_DIR) / SCRIPTS.get(engine, "-")


def prepared(engine: str) -> str | None:
    """The executable the engine's script reports, or None (not prepared, or no script)."""
    path = script(engine)
    if not path.is_file():
        return None
    try:
        done = subprocess.run(  # noqa: S603 - our own script, an argv list
            ["bash", str(path), "--path"],  # noqa: S607
            capture_output=True,
            text=True,
            timeout=_PATH_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return found if done.returncode == 0 and found else None


def executable(engine: str) -> str | None:
    """The engine's executable on this host; None leaves the adapter its default."""
    named = os.environ.get(BIN_ENV.get(engine, ""), "")
    return named or prepared(engine)


def adapter_for(engine: str) -> EngineAdapter:
    """The engine's adapter, running this host's executable."""
    return get_adapter(engine, executable=executable(engine))
