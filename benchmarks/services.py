"""The write path for benchmark runs: start (role, checks, audit, task on the host's queue) and
cancel. Each is one transaction with its audit row; the task is sent on commit.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest

from benchmarks import events
from benchmarks.models import BenchmarkRun, RunStatus
from benchmarks.workload import Workload, WorkloadError, parse_workload
from controlpanel.audit import audit_record
from controlpanel.celery import app as celery_app
from controlpanel.celery import host_queue
from controlpanel.roles import Role, has_role
from deployments.models import Deployment, Status

TASK = "benchmarks.run"


class BenchmarkError(Exception):
    """Refused; the message says why and what to change."""


def _require_operator(user: Any) -> None:
    if not has_role(user, Role.OPERATOR):
        raise BenchmarkError("Your role does not allow this: it needs Operator.")


def layout_of(d: Deployment) -> dict[str, Any]:
    """The deployment as it is measured: stored with the run, so a comparison stays readable
    after the deployment is gone."""
    leases = list(d.leases.filter(active=True).select_related("gpu"))
    plan = d.snapshot
    return {
        "deployment": d.name,
        "model": d.model_id,
        "engine": d.engine,
        "host": d.host.name,
        "simulated": d.host.simulated,
        "gpu_indices": sorted(lease.gpu.index for lease in leases),
        "gpu_names": sorted({lease.gpu.name for lease in leases}),
        "memory_bytes_per_gpu": max((lease.memory_bytes for lease in leases), default=0),
        "tensor_parallel_size": plan.engine_args.tensor_parallel_size,
        "pipeline_parallel_size": plan.engine_args.pipeline_parallel_size,
        "max_model_len": plan.engine_args.max_model_len,
        "plan_max_concurrency": plan.max_concurrency,
        "plan_kv_cache_tokens": plan.kv_cache_tokens,
        "command": list(d.argv) or list(d.planned_argv),
    }


def _check_time(workload: Workload) -> None:
    if workload.duration_s is None:
        return
    total_s = workload.duration_s * len(workload.levels)
    budget_s = settings.CELERY_TASK_SOFT_TIME_LIMIT - 120
    if total_s > budget_s:
        raise BenchmarkError(
            f"The levels would run {total_s:.0f} s in all; a run may take at most {budget_s} s "
            "(CELERY_TASK_SOFT_TIME_LIMIT). Shorten the levels or run fewer."
        )


@transaction.atomic
def run_start(
    *,
    user: Any,
    deployment: Deployment,
    workload: dict[str, Any],
    label: str = "",
    http_request: HttpRequest | None = None,
) -> BenchmarkRun:
    _require_operator(user)
    d = Deployment.objects.select_for_update().select_related("host").get(pk=deployment.pk)
    if d.status != Status.RUNNING:
        raise BenchmarkError(
            f"{d.name} is {d.get_status_display().lower()}: benchmark a running deployment."
        )
    try:
        parsed = parse_workload(workload)
    except WorkloadError as exc:
        raise BenchmarkError(str(exc)) from None
    _check_time(parsed)
    busy = BenchmarkRun.objects.filter(
        deployment=d, status__in=[RunStatus.PENDING, RunStatus.RUNNING]
    ).first()
    if busy is not None:
        raise BenchmarkError(f"{busy.title} of {d.name} is still {busy.status}: one run at a time.")
    run = BenchmarkRun.objects.create(
        deployment=d,
        label=label.strip()[:100],
        workload=parsed.to_dict(),
        layout=layout_of(d),
        created_by=user,
    )
    audit_record(
        actor=user,
        action="benchmark.start",
        target_type="deployment",
        target_id=d.pk,
        request=http_request,
        detail={"run": run.pk, "deployment": d.name, "workload": parsed.describe()},
    )
    queue = host_queue(d.host.name)
    transaction.on_commit(lambda: celery_app.send_task(TASK, args=[run.pk], queue=queue))
    return run


@transaction.atomic
def run_cancel(
    *, user: Any, run: BenchmarkRun, http_request: HttpRequest | None = None
) -> BenchmarkRun:
    """Pending: cancelled now. Running: flagged; the host task stops within half a second."""
    _require_operator(user)
    run = BenchmarkRun.objects.select_for_update().get(pk=run.pk)
    if run.ended:
        raise BenchmarkError(f"{run.title} has already {run.get_status_display().lower()}.")
    run.cancel_requested = True
    run.save(update_fields=["cancel_requested"])
    if run.status == RunStatus.PENDING:
        run.transition(RunStatus.CANCELLED)
    audit_record(
        actor=user,
        action="benchmark.cancel",
        target_type="deployment",
        target_id=run.deployment_id,
        request=http_request,
        detail={"run": run.pk},
    )
    transaction.on_commit(lambda: events.publish(run))
    return run
