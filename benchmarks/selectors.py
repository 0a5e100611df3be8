"""Read paths for the benchmark pages: a run's charts, two runs compared, the deployment
page's section, the JSON export. GPU samples come through monitoring's selectors."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from benchmarks import gpu_series, summary
from benchmarks.bottleneck import compare_layouts
from benchmarks.models import BenchmarkRun
from benchmarks.workload import WorkloadError, parse_workload
from deployments.models import Deployment
from monitoring.selectors import samples_between

DEFINITIONS = (
    "Figures follow vllm bench serve's definitions: TTFT to the first streamed chunk, ITL "
    "between later chunks, TPOT = (E2EL - TTFT) / (output tokens - 1), throughputs over the "
    "level's wall time, linear-interpolated percentiles."
)


def runs_of(deployment: Deployment) -> QuerySet[BenchmarkRun]:
    return BenchmarkRun.objects.filter(deployment=deployment).select_related("created_by")


def comparable_runs(run: BenchmarkRun) -> QuerySet[BenchmarkRun]:
    """Ended runs with figures, newest first, other than `run`: choices for a comparison."""
    return (
        BenchmarkRun.objects.exclude(pk=run.pk)
        .exclude(levels=[])
        .select_related("deployment")
        .order_by("-created_at")[:50]
    )


def gpu_over_run(run: BenchmarkRun) -> dict[str, Any] | None:
    if not run.levels:
        return None
    start, end = run.levels[0]["started_ms"], run.levels[-1]["ended_ms"]
    samples = samples_between(run.layout.get("host", ""), start, end)
    data = gpu_series.series(samples, run.layout.get("gpu_indices", []))
    data["levels"] = [
        {"c": lv["load"], "from": lv["started_ms"], "to": lv["ended_ms"]} for lv in run.levels
    ]
    return data


def chart_data(run: BenchmarkRun) -> dict[str, Any]:
    return {
        "id": run.pk,
        "title": run.title,
        "status": run.status,
        "levels": summary.chart_levels(run.levels),
        "gpu": gpu_over_run(run),
        "sla": {
            "ttft_p95_ms": run.workload.get("sla_ttft_p95_ms"),
            "itl_p95_ms": run.workload.get("sla_itl_p95_ms"),
        },
        "simulated": bool(run.layout.get("simulated")),
        "mode": run.workload.get("mode", "concurrency"),
    }


def run_context(run: BenchmarkRun) -> dict[str, Any]:
    return {
        "run": run,
        "d": run.deployment,
        "levels": sorted(run.levels, key=lambda lv: lv["load"]),
        "chart": chart_data(run),
        "plan": summary.plan_vs_measured(run.layout, run.levels, run.workload),
        "others": comparable_runs(run),
        "definitions": DEFINITIONS,
        "workload_text": _describe(run.workload),
    }


def _describe(workload: dict[str, Any]) -> str:
    try:
        return parse_workload(workload).describe()
    except WorkloadError:
        return ""


def best_throughput(run: BenchmarkRun) -> float:
    return max((lv["output_throughput"] for lv in run.levels), default=0.0)


def compare_context(a: BenchmarkRun, b: BenchmarkRun) -> dict[str, Any]:
    runs = [a, b]
    ranked = sorted(runs, key=lambda r: int(r.layout.get("tensor_parallel_size") or 1))
    reading = compare_layouts(
        (int(ranked[0].layout.get("tensor_parallel_size") or 1), best_throughput(ranked[0])),
        (int(ranked[1].layout.get("tensor_parallel_size") or 1), best_throughput(ranked[1])),
    )
    return {
        "runs": [
            {
                "run": r,
                "plan": summary.plan_vs_measured(r.layout, r.levels, r.workload),
                "best": best_throughput(r),
            }
            for r in runs
        ],
        "charts": [
            {
                "id": r.pk,
                "title": r.title,
                "mode": r.workload.get("mode", "concurrency"),
                "levels": summary.chart_levels(r.levels),
            }
            for r in runs
        ],
        "reading": None if reading is None else reading.to_dict(),
    }


def deployment_section(d: Deployment) -> dict[str, Any]:
    runs = list(runs_of(d)[:5])
    latest = next((r for r in runs if r.levels), None)
    plan = (
        None
        if latest is None
        else summary.plan_vs_measured(latest.layout, latest.levels, latest.workload)
    )
    return {"d": d, "runs": runs, "latest": latest, "plan": plan}


def export(run: BenchmarkRun) -> dict[str, Any]:
    return {
        "id": run.pk,
        "label": run.label,
        "status": run.status,
        "error": run.error,
        "deployment": run.deployment.name,
        "created_by": run.created_by.get_username(),
        "created_at": run.created_at.isoformat(),
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "definitions": DEFINITIONS,
        "layout": run.layout,
        "workload": run.workload,
        "levels": run.levels,
        "plan_vs_measured": summary.plan_vs_measured(run.layout, run.levels, run.workload),
        "gpu": gpu_over_run(run),
    }
