"""A launch whose engine this host is still preparing waits for it, as a step of its start
("Waiting for the engine to be prepared", with the preparation's progress), then goes on."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings

from deployments.host.launchphases import Recorder
from deployments.host.prepare import rows
from deployments.models import Deployment, EnginePrep, LaunchPhase, Phase, PrepState

POLL_S = 1.0


def wait_for_engine(
    d: Deployment, recorder: Recorder, *, sleep: Callable[[float], None] = time.sleep
) -> str | None:
    """Block while this host prepares `d`'s engine (bounded by SHARDBOARD_ENGINE_WAIT_S); the
    reason the launch cannot go on, else None (ready, not known here, or `d` moved on, which
    the caller sees for itself)."""
    row = rows.current(d.engine)
    if row is None or row.state != PrepState.PREPARING:
        return refusal(row)
    deadline = time.monotonic() + settings.SHARDBOARD_ENGINE_WAIT_S
    status = d.status
    while row is not None and row.state == PrepState.PREPARING:
        _show(recorder, row)
        if time.monotonic() >= deadline:
            recorder.close()
            return (
                f"{row.get_engine_display()} was still being prepared on this host after "
                f"{settings.SHARDBOARD_ENGINE_WAIT_S:g} s (SHARDBOARD_ENGINE_WAIT_S)"
            )
        if not Deployment.objects.filter(pk=d.pk, status=status).exists():
            break
        sleep(POLL_S)
        row = rows.current(d.engine)
    recorder.end_step()
    recorder.tracker.current = None  # the engine's own steps follow, from its log
    return refusal(row)


def refusal(row: EnginePrep | None) -> str | None:
    """Why a launch on this engine cannot start here (its preparation failed); None otherwise."""
    if row is None or row.state != PrepState.FAILED:
        return None
    return (
        f"{row.get_engine_display()} could not be prepared on this host: {row.error} "
        "(an operator can retry it from the dashboard)"
    )


def _show(recorder: Recorder, row: EnginePrep) -> None:
    text = step_text(row)
    recorder.enter(Phase.ENGINE, done=row.percent or 0, total=100 if row.total else 0, text=text)
    if recorder.row is not None and recorder.row.detail != text:
        recorder.row.detail = text
        LaunchPhase.objects.filter(pk=recorder.row.pk).update(detail=text[:300])


def step_text(row: EnginePrep) -> str:
    """ "vLLM: Installing its 146 pinned requirements · 12 of 146 packages"."""
    progress = row.progress_text
    return f"{row.get_engine_display()}: {row.phase or 'starting'}" + (
        f" · {progress}" if progress else ""
    )
