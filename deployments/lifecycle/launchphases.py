"""The steps of a deployment's start as the pages show them: each step's state, progress and
time taken, and the time to expect from earlier starts of the same model and engine."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from deployments.models import Deployment, LaunchPhase, ModelDownload, Phase, Status

EXPECT_FROM_STARTS = 5  # the median of this many earlier starts
_UNITS = {Phase.LOADING: "shards", Phase.CUDA_GRAPHS: "graphs"}


@dataclass(frozen=True, slots=True)
class StepRow:
    phase: str
    label: str
    state: str  # done, current, waiting, or cut (the start ended during it)
    duration_s: float | None
    expected_s: float | None
    done: int
    total: int
    text: str

    @property
    def percent(self) -> int | None:
        return round(100 * self.done / self.total) if self.total else None


@dataclass(frozen=True, slots=True)
class HostWeights:
    """The weights download of a further host of a launch over several hosts."""

    host: str
    status: str
    status_label: str
    done: int
    total: int
    text: str


@dataclass(frozen=True, slots=True)
class Steps:
    rows: list[StepRow]
    expected_total_s: float | None
    live: bool  # the start is under way: the page updates the steps as they come
    hosts: list[HostWeights]

    @property
    def shown(self) -> bool:
        return self.live or any(r.state != "waiting" for r in self.rows)


def launch_steps(d: Deployment) -> Steps:
    phases = {p.phase: p for p in LaunchPhase.objects.filter(deployment=d, attempt=d.restart_count)}
    expected = expected_durations(d)
    live = d.status in (Status.PENDING, Status.STARTING, Status.RESTARTING)
    # a launch over several hosts has one download per host: the steps are the lead's
    download = (
        ModelDownload.objects.filter(deployment=d, host_id=d.host_id)
        .order_by("-created_at")
        .first()
    )
    rows = [
        _row(p, phases.get(p), expected.get(p), download, live=live)
        for p in Phase
        if p != Phase.ENGINE or p in phases  # a step only for a start that waited for it
    ]
    total = sum(expected.values()) if expected else None
    return Steps(rows, total, live, _further_hosts(d))


def _further_hosts(d: Deployment) -> list[HostWeights]:
    """Each other host's latest download for this deployment (before its Ray node joins)."""
    others = ModelDownload.objects.filter(deployment=d).exclude(host_id=d.host_id)
    latest = {row.host.name: row for row in others.order_by("created_at").select_related("host")}
    return [
        HostWeights(
            host=name,
            status=row.status,
            status_label=row.get_status_display(),
            done=row.bytes_done,
            total=row.bytes_total,
            text=row.error[:300] or download_text(row.bytes_done, row.bytes_total, 0, None),
        )
        for name, row in sorted(latest.items())
    ]


def _row(
    phase: Phase,
    row: LaunchPhase | None,
    expected_s: float | None,
    download: ModelDownload | None,
    *,
    live: bool,
) -> StepRow:
    if row is None:
        return StepRow(phase, phase.label, "waiting", None, expected_s, 0, 0, "")
    state = "done" if row.ended_at else "current" if live else "cut"
    text = _text(phase, row, download)
    return StepRow(phase, phase.label, state, row.duration_s, expected_s, row.done, row.total, text)


def _text(phase: Phase, row: LaunchPhase, download: ModelDownload | None) -> str:
    if phase == Phase.ENGINE:
        return row.detail
    if phase == Phase.DOWNLOADING:
        if download is None:
            return "already on this host"
        return download_text(download.bytes_done, download.bytes_total, download.rate_bps, None)
    if row.total and phase in _UNITS:
        return f"{row.done} of {row.total} {_UNITS[phase]}"
    return ""


def download_text(done: int, total: int, rate_bps: float, eta_s: float | None) -> str:
    parts = [f"{_bytes(done)} of {_bytes(total)}"]
    if rate_bps:
        parts.append(f"{_bytes(int(rate_bps))}/s")
    if eta_s:
        parts.append(f"{eta_s:.0f} s left")
    return " · ".join(parts)


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"


def expected_durations(d: Deployment) -> dict[str, float]:
    """Median seconds per step over the last starts of the same model and engine that got
    to ready (this deployment's excluded)."""
    earlier = (
        LaunchPhase.objects.filter(
            deployment__model_id=d.model_id,
            deployment__engine=d.engine,
            phase=Phase.READY,
        )
        .exclude(deployment=d)
        .order_by("-started_at")
        .values_list("deployment_id", "attempt")[:EXPECT_FROM_STARTS]
    )
    starts = set(earlier)
    if not starts:
        return {}
    durations: dict[str, list[float]] = defaultdict(list)
    rows = LaunchPhase.objects.filter(
        deployment_id__in={pk for pk, _ in starts}, ended_at__isnull=False
    ).exclude(phase__in=[Phase.READY, Phase.ENGINE])  # an engine is prepared once, not per start
    for row in rows:
        if (row.deployment_id, row.attempt) in starts and row.duration_s is not None:
            durations[row.phase].append(row.duration_s)
    return {phase: statistics.median(values) for phase, values in durations.items()}


def progress_texts(ids: list[int]) -> dict[int, str]:
    """The list page's Progress column: the step each starting deployment is at."""
    latest: dict[int, LaunchPhase] = {}
    rows = LaunchPhase.objects.filter(
        deployment_id__in=ids,
        deployment__status__in=[Status.PENDING, Status.STARTING, Status.RESTARTING],
    )
    for row in rows.order_by("started_at", "id"):
        latest[row.deployment_id] = row
    return {pk: _short(row) for pk, row in latest.items()}


def _short(row: LaunchPhase) -> str:
    label = Phase(row.phase).label
    return f"{label} {round(100 * row.done / row.total)}%" if row.total else label
