"""The engines of this host, prepared in the background once the worker is up.

When the host worker starts, each engine is looked for (its variable, else its script's
`--path`); one that is missing and named in SHARDBOARD_PREPARE_ENGINES is prepared by its
script (scripts/transformers.sh, vllm.sh, llama.sh) while the web server already answers. The
rows (`EnginePrep`) say how far each got, pushed to the dashboard and the launch form; a launch
that needs an engine still being prepared waits for it (`wait.wait_for_engine`); a failed one
is prepared again when an operator retries it (the task `deployments.prepare_engine`).
"""

from __future__ import annotations

from typing import Any

from celery.signals import worker_ready, worker_shutdown

from deployments.host.prepare import runner
from deployments.host.prepare.wait import wait_for_engine

__all__ = ["retry", "wait_for_engine"]


def retry(engine: str) -> dict[str, Any]:
    """Prepare `engine` again (an operator asked, from the pages)."""
    if engine not in runner.ENGINES:
        return {"skipped": f"no engine {engine!r}"}
    if runner.start(engine, prepare=True):
        return {"preparing": engine}
    return {"skipped": f"{engine} is being prepared already"}


@worker_ready.connect
def _on_ready(**kwargs: Any) -> None:
    runner.start_all()


@worker_shutdown.connect
def _on_shutdown(**kwargs: Any) -> None:
    runner.stop_all()
