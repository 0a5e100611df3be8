"""The benchmark task, on the deployment's host queue (sent by name from the web side)."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import worker_ready

from benchmarks.host import run as benchmark_run


@shared_task(name="benchmarks.run", acks_late=True)
def run(run_id: int) -> dict[str, Any]:
    return benchmark_run.run(run_id)


@worker_ready.connect
def on_worker_ready(**_: Any) -> None:
    benchmark_run.fail_interrupted()
