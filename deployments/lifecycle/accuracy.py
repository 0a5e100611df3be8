"""The planner's error on every engine start the fleet recorded (``StartObservation``): the
Planner accuracy page, the deployment page's block and `export_planner_cases` read it here.

Error = (measured − planned) / measured, signed: positive where the plan under-counted. A
failed start the plan said fits is the worst case there is (an operator waited for an OOM), so
it leads the flags whatever the figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from deployments.models import Outcome, StartObservation
from deployments.planning.units import GIB

WORST_ERROR = 0.05  # a start off by more than this on weights or KV tokens is flagged


def relative_error(planned: int | None, measured: int | None) -> float | None:
    if planned is None or measured is None or measured == 0:
        return None
    return (measured - planned) / measured


@dataclass(frozen=True, slots=True)
class StartError:
    row: StartObservation
    weights: float | None
    kv_tokens: float | None
    kv_bytes: float | None
    false_fit: bool  # the plan said it fits; the engine was refused for memory

    @property
    def worst(self) -> float:
        known = [abs(e) for e in (self.weights, self.kv_tokens) if e is not None]
        return max(known, default=0.0)

    @property
    def flagged(self) -> bool:
        return self.false_fit or self.worst > WORST_ERROR


def start_error(row: StartObservation) -> StartError:
    return StartError(
        row=row,
        weights=relative_error(row.planned_weights_bytes, row.measured_weights_bytes),
        kv_tokens=relative_error(row.planned_kv_tokens, row.measured_kv_tokens),
        kv_bytes=relative_error(row.planned_kv_bytes, row.measured_kv_bytes),
        false_fit=row.outcome == Outcome.FAILED and row.planned_fits,
    )


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:+.2f} %"


def gib(value: int | None) -> str:
    return "—" if value is None else f"{value / GIB:,.2f} GiB"


@dataclass(frozen=True, slots=True)
class GroupRow:
    """The starts of one (model family, GPU model, engine, version)."""

    family: str
    gpu_model: str
    engine: str
    engine_version: str
    starts: int
    mean_weights: float | None
    mean_kv_tokens: float | None
    flagged: int


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def group_rows(errors: Sequence[StartError]) -> list[GroupRow]:
    groups: dict[tuple[str, str, str, str], list[StartError]] = {}
    for e in errors:
        r = e.row
        key = (r.model_family or "unknown", r.gpu_model or "CPU", r.engine, r.engine_version)
        groups.setdefault(key, []).append(e)
    return [
        GroupRow(
            *key,
            starts=len(items),
            mean_weights=_mean(e.weights for e in items),
            mean_kv_tokens=_mean(e.kv_tokens for e in items),
            flagged=sum(e.flagged for e in items),
        )
        for key, items in sorted(groups.items())
    ]


def all_errors() -> list[StartError]:
    """Every start, worst first."""
    rows = StartObservation.objects.select_related("deployment")
    return sorted(
        (start_error(r) for r in rows), key=lambda e: (not e.false_fit, -e.worst, -e.row.pk)
    )


def deployment_starts(deployment_id: int) -> list[dict[str, str | int | bool]]:
    """The deployment page's block: each start's planned vs logged figures and the difference."""
    rows = StartObservation.objects.filter(deployment_id=deployment_id).order_by("attempt")
    return [_start_block(start_error(r)) for r in rows]


def start_row(e: StartError) -> dict[str, str | int | bool]:
    """One start on the accuracy page: the block's figures and where it ran."""
    r = e.row
    return {
        **_start_block(e),
        "deployment_id": r.deployment_id,
        "deployment": r.deployment.name,
        "when": r.recorded_at.strftime("%Y-%m-%d %H:%M"),
        "model": r.model_ref,
        "family": r.model_family or "unknown",
        "gpu_model": r.gpu_model or "CPU",
        "layout": f"TP {r.tensor_parallel_size} × PP {r.pipeline_parallel_size}",
        "false_fit": e.false_fit,
    }


def _start_block(e: StartError) -> dict[str, str | int | bool]:
    r = e.row
    return {
        "attempt": r.attempt,
        "engine": f"{r.engine} {r.engine_version}".strip(),
        "outcome": r.get_outcome_display(),
        "weights": f"{gib(r.planned_weights_bytes)} / {gib(r.measured_weights_bytes)}",
        "weights_error": percent(e.weights),
        "kv_tokens": f"{_count(r.planned_kv_tokens)} / {_count(r.measured_kv_tokens)}",
        "kv_tokens_error": percent(e.kv_tokens),
        "kv_bytes": f"{gib(r.planned_kv_bytes)} / {gib(r.measured_kv_bytes)}",
        "graphs": f"{gib(r.planned_cuda_graph_bytes)} / {gib(r.measured_cuda_graph_bytes)}",
        "tensors": "—" if r.measured_weight_tensors is None else str(r.measured_weight_tensors),
        "flagged": e.flagged,
    }


def _count(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"
