"""This host's `EnginePrep` rows: each write is one UPDATE (or the first row's INSERT) and a
push to the pages after it commits."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import timezone

from deployments.host.prepare.progress import Progress
from deployments.live import prep as pushes
from deployments.models import EnginePrep, PrepState
from monitoring.models import Host


def _host() -> Host | None:
    return Host.objects.filter(name=settings.SHARDBOARD_HOST_NAME).first()


def host_registered() -> bool:
    return Host.objects.filter(name=settings.SHARDBOARD_HOST_NAME).exists()


def write(engine: str, **fields: Any) -> EnginePrep | None:
    """Set `fields` on this host's row for `engine` (made if missing) and push it; None before
    the host registered (its first heartbeat comes before any preparation)."""
    host = _host()
    if host is None:
        return None
    row, _ = EnginePrep.objects.update_or_create(host=host, engine=engine, defaults=fields)
    pushes.publish_on_commit(row, host.name)
    return row


def found(engine: str, executable: str, note: str) -> EnginePrep | None:
    """The engine is there (prepared before, or named by its variable)."""
    return write(
        engine,
        state=PrepState.READY,
        executable=executable,
        note=note,
        error="",
        phase="",
        done=0,
        total=0,
        unit="",
    )


def absent(engine: str, note: str) -> EnginePrep | None:
    return write(engine, state=PrepState.ABSENT, executable="", note=note, phase="", error="")


def begin(engine: str) -> EnginePrep | None:
    row = EnginePrep.objects.filter(host__name=settings.SHARDBOARD_HOST_NAME, engine=engine).first()
    return write(
        engine,
        state=PrepState.PREPARING,
        phase="Starting",
        done=0,
        total=0,
        unit="",
        started_at=timezone.now(),
        finished_at=None,
        attempt=(row.attempt if row else 0) + 1,
        log_tail="",
        error="",
        executable="",
        note="",
    )


def progress(engine: str, state: Progress) -> EnginePrep | None:
    return write(
        engine,
        phase=state.phase[:200],
        done=state.done,
        total=state.total,
        unit=state.unit,
        log_tail="\n".join(state.tail),
    )


def ended(engine: str, state: Progress, *, executable: str, error: str) -> EnginePrep | None:
    fields: dict[str, Any] = {
        "state": PrepState.FAILED if error else PrepState.READY,
        "error": error[:2000],
        "executable": executable,
        "finished_at": timezone.now(),
        "log_tail": "\n".join(state.tail),
    }
    if not error:
        fields |= {"phase": "Ready", "done": state.total or state.done, "note": ""}
    return write(engine, **fields)


def current(engine: str) -> EnginePrep | None:
    """This host's row for `engine` as the database has it."""
    return EnginePrep.objects.filter(
        host__name=settings.SHARDBOARD_HOST_NAME, engine=engine
    ).first()
