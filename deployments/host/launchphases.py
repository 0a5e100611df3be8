"""The steps of one engine start, kept as rows (``LaunchPhase``) and pushed to the pages.

The launch opens a recorder per start (a worker that adopts a starting engine after a restart
resumes it); the download reports its bytes to it, the log shipper
hands it each batch of the engine's lines (``engines.phases`` reads the step from them), and
the launch closes it with `ready` once the probe passed (or ends it when the start failed).
A push per step change, and at most one per PUSH_EVERY_S for a step's progress.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import DatabaseError
from django.utils import timezone

from deployments.engines import startup_figures
from deployments.engines.phases import READY, PhaseTracker
from deployments.host import calibration
from deployments.live import pushes
from deployments.models import Deployment, LaunchPhase, Phase

log = logging.getLogger(__name__)
PUSH_EVERY_S = 0.5

_open: dict[int, Recorder] = {}
_lock = threading.Lock()


class Recorder:
    def __init__(self, d: Deployment) -> None:
        self.pk, self.attempt = d.pk, d.restart_count
        self.tracker = PhaseTracker()
        self.figures = startup_figures.StartFigures()
        self.model_path = ""  # the folder the engine loads: its family (set by the launch)
        self._buffer_lines: list[str] = []  # llama-server's, read once the start is over
        self._recorded = False
        self._closed = False
        self.row: LaunchPhase | None = None
        self._pushed_at = 0.0
        self._lock = threading.Lock()

    def enter(self, phase: str, *, done: int = 0, total: int = 0, **extra: Any) -> None:
        """Close the step in progress and open `phase` (a no-op if it is the current one)."""
        with self._lock:
            if self.row is not None and self.row.phase == phase:
                return self._progress(done, total, force=True, **extra)
            now = timezone.now()
            if self.row is not None and self.row.ended_at is None:
                LaunchPhase.objects.filter(pk=self.row.pk).update(ended_at=now)
            self.tracker.current = phase
            self.row, _ = LaunchPhase.objects.update_or_create(
                deployment_id=self.pk,
                attempt=self.attempt,
                phase=phase,
                defaults={"started_at": now, "ended_at": None, "done": done, "total": total},
            )
            self._push(force=True, **extra)

    def progress(self, done: int, total: int, *, force: bool = False, **extra: Any) -> None:
        with self._lock:
            self._progress(done, total, force=force, **extra)

    def _progress(self, done: int, total: int, *, force: bool, **extra: Any) -> None:
        if self.row is None:
            return
        self.row.done, self.row.total = done, total
        if force or time.monotonic() - self._pushed_at >= PUSH_EVERY_S:
            LaunchPhase.objects.filter(pk=self.row.pk).update(done=done, total=total)
            self._push(force=True, **extra)

    def feed(self, lines: list[str]) -> None:
        """Engine output: the step it shows, and a bar's progress. Never fails the shipper."""
        self._read_figures(lines)
        if self._closed:  # the lines after a failed start's end: vLLM's reason comes last
            self._record(ready=False)
        try:
            for line in lines:
                step = self.tracker.feed(line)
                if step is None:
                    continue
                if self.row is None or step.phase != self.row.phase:
                    self.enter(step.phase, done=step.done, total=step.total)
                else:
                    self.progress(step.done, step.total, force=step.done == step.total)
        except DatabaseError as exc:
            log.warning("launch steps of deployment %s not recorded: %s", self.pk, exc)

    def _read_figures(self, lines: list[str]) -> None:
        with self._lock:
            for line in lines:
                self.figures = startup_figures.read_line(self.figures, line)
                if "buffer size" in line:
                    self._buffer_lines.append(line)

    def _record(self, *, ready: bool) -> None:
        """This start's figures beside its plan (``calibration``): once, at ready, or at its
        end when the engine said it was refused for memory."""
        with self._lock:
            if self._recorded or not (ready or self.figures.failure):
                return
            self._recorded = True
            figures = self.figures
            if self._buffer_lines:
                text = "\n".join(self._buffer_lines)
                figures = startup_figures.llamacpp_figures(text, figures)
        calibration.record(
            deployment_id=self.pk,
            attempt=self.attempt,
            figures=figures,
            model_path=self.model_path,
        )

    def end_step(self) -> None:
        """The current step is over though the next has not begun (the download is done; the
        engine has yet to say it loads): its time is not the engine's start-up."""
        with self._lock:
            if self.row is not None and self.row.ended_at is None:
                self.row.ended_at = timezone.now()
                LaunchPhase.objects.filter(pk=self.row.pk).update(ended_at=self.row.ended_at)

    def ready(self) -> None:
        """The probe passed. Never fails the launch: the steps are what pages show."""
        try:
            self.enter(READY)
            self._record(ready=True)
            self.close()
        except DatabaseError as exc:
            log.warning("launch steps of deployment %s: ready not recorded: %s", self.pk, exc)
            self._forget()

    def close(self) -> None:
        """The start ended (ready, failed or stopped): the open step ends now."""
        self._record(ready=False)
        self._closed = True
        with self._lock:
            if self.row is not None and self.row.ended_at is None:
                LaunchPhase.objects.filter(pk=self.row.pk).update(ended_at=timezone.now())
                self.row.ended_at = timezone.now()
        self._forget()

    def _forget(self) -> None:
        with _lock:
            if _open.get(self.pk) is self:
                del _open[self.pk]

    def _push(self, *, force: bool, **extra: Any) -> None:
        row = self.row
        if row is None:
            return
        self._pushed_at = time.monotonic()
        payload = {
            "type": "deployment.progress",
            "id": self.pk,
            "phase": row.phase,
            "phase_label": Phase(row.phase).label,
            "done": row.done,
            "total": row.total,
            **extra,
        }
        pushes.publish_progress(payload, stream=pushes.progress_key("deployment", self.pk))


def open_for(d: Deployment) -> Recorder:
    """A new recorder for this start of `d` (a restart's replaces the last one's)."""
    recorder = Recorder(d)
    if not d.restart_count:
        pushes.reset_progress(pushes.progress_key("deployment", d.pk))
    with _lock:
        _open[d.pk] = recorder
    return recorder


def resume_for(d: Deployment) -> Recorder:
    """The recorder of a start that a restarted worker adopted: it goes on from the last step
    the worker before it recorded (the log lines that worker read are not read again), so the
    start still ends with `ready` and no step is left open."""
    recorder = Recorder(d)
    last = (
        LaunchPhase.objects.filter(deployment_id=d.pk, attempt=d.restart_count)
        .order_by("-started_at", "-id")
        .first()
    )
    if last is not None:
        recorder.row = last
        tracker = recorder.tracker
        tracker.current, tracker.done, tracker.total = last.phase, last.done, last.total
    with _lock:
        _open[d.pk] = recorder
    return recorder


def current(pk: int) -> Recorder | None:
    with _lock:
        return _open.get(pk)
