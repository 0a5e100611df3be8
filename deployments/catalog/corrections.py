"""The planner's per-(GPU model, vLLM version) corrections, learned from the fleet's recorded
starts (``StartObservation``) and handed to the planner in ``PlanRequest.corrections``.

The planner stays pure: this reads the rows, reduces each start to its residual and leaves the
rule (how many starts, which sign, the cap, the margin) to ``planning.learn_correction``.
``SHARDBOARD_PLANNER_CORRECTION=off`` turns it off for the whole installation, a plan's
``learned_correction=False`` for that plan alone.
"""

from __future__ import annotations

from django.conf import settings

from deployments import planning
from deployments.models import Engine, Outcome, StartObservation

# The latest starts of each (GPU model, version) only: a driver upgraded last week should
# not be outvoted by the months before it.
WINDOW = 20


def residual(row: StartObservation) -> int | None:
    """Memory per GPU the plan counted for the KV cache that vLLM did not have, less what the
    weights explain, as if no correction had been applied; None without both KV figures."""
    if row.planned_kv_bytes is None or row.measured_kv_bytes is None:
        return None
    weights = 0
    if row.planned_weights_bytes is not None and row.measured_weights_bytes is not None:
        weights = row.measured_weights_bytes - row.planned_weights_bytes
    planned_kv = row.planned_kv_bytes + row.planned_correction_bytes  # the uncorrected plan
    return planned_kv - row.measured_kv_bytes - weights


def fleet_corrections() -> tuple[planning.Correction, ...]:
    """Every correction the recorded vLLM starts support; () when switched off."""
    if not settings.SHARDBOARD_PLANNER_CORRECTION:
        return ()
    rows = (
        StartObservation.objects.filter(
            engine=Engine.VLLM,
            outcome=Outcome.OK,
            planned_kv_bytes__isnull=False,
            measured_kv_bytes__isnull=False,
        )
        .exclude(gpu_model="")
        .exclude(engine_version="")
        .order_by("-recorded_at", "-id")
    )
    groups: dict[tuple[str, str], list[StartObservation]] = {}
    for row in rows:
        starts = groups.setdefault((row.gpu_model, row.engine_version), [])
        if len(starts) < WINDOW:
            starts.append(row)
    found = (_learn(gpu, version, starts) for (gpu, version), starts in sorted(groups.items()))
    return tuple(c for c in found if c is not None)


def _learn(gpu: str, version: str, starts: list[StartObservation]) -> planning.Correction | None:
    residuals = [r for r in (residual(row) for row in starts) if r is not None]
    try:
        return planning.learn_correction(
            gpu_model=gpu,
            vllm_version=version,
            gpu_total_bytes=min(row.gpu_total_bytes for row in starts),
            residuals=residuals,
        )
    except planning.PlanningError:
        return None  # a version string the planner cannot read: no correction for it
