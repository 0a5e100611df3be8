"""The Planner accuracy page (admins): every recorded engine start's error, worst first, and
the error per model family, GPU model and engine version. Thin: ``accuracy`` does the work."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlpanel.roles import Role, role_required
from deployments import planning
from deployments.catalog.corrections import fleet_corrections
from deployments.lifecycle import accuracy


@role_required(Role.ADMIN)
def planner_accuracy(request: HttpRequest) -> HttpResponse:
    errors = accuracy.all_errors()
    context = {
        "groups": [
            {**_group(g), "flagged": g.flagged, "starts": g.starts}
            for g in accuracy.group_rows(errors)
        ],
        "starts": [accuracy.start_row(e) for e in errors],
        "worst_error": f"{accuracy.WORST_ERROR * 100:.0f} %",
        "corrections": [_correction(c) for c in fleet_corrections()],
        "correction_state": (
            "on" if settings.SHARDBOARD_PLANNER_CORRECTION else "off: SHARDBOARD_PLANNER_CORRECTION"
        ),
    }
    return render(request, "deployments/planner_accuracy.html", context)


def _group(g: accuracy.GroupRow) -> dict[str, str]:
    return {
        "family": g.family,
        "gpu_model": g.gpu_model,
        "engine": f"{g.engine} {g.engine_version}".strip(),
        "weights": accuracy.percent(g.mean_weights),
        "kv_tokens": accuracy.percent(g.mean_kv_tokens),
    }


def _correction(c: planning.Correction) -> dict[str, str | int]:
    return {
        "gpu_model": c.gpu_model,
        "vllm_version": c.vllm_version,
        "starts": c.starts,
        "applied": accuracy.gib(c.outside_bytes),
        "learned": accuracy.gib(c.learned_bytes) + (" (capped)" if c.capped else ""),
        "spread": accuracy.gib(c.spread_bytes),
    }
