"""Start this machine's host worker: a Celery worker on queue host.<name> that owns its GPUs.

Importing the apps' host modules connects their Celery signal handlers (engine watchdog and
reconcile, monitoring's agent) in this process only; the tasks of ``deployments.host``,
``benchmarks.host`` and ``teams.host`` are found by the Celery app's autodiscovery.
"""

from __future__ import annotations

import os

from django.conf import settings

from controlpanel.celery import app, host_queue
from deployments.host import autoscaler  # noqa: F401  (the leased autoscaler loop)
from deployments.host import watchdog as deployments_worker  # noqa: F401  (engine watchdog, reconcile)
from monitoring.host import worker as monitoring_worker  # noqa: F401  (connects its signal handlers)


def run(*, name: str, concurrency: int, loglevel: str, default_queue: bool) -> None:
    os.environ["SHARDBOARD_HOST_NAME"] = name
    settings.SHARDBOARD_HOST_NAME = name
    queues = [host_queue(name), "default"] if default_queue else [host_queue(name)]
    # Threads, not prefork: the sampler, the engine watchdog and the tasks share one process
    # that owns the GPUs and the engine processes it spawned.
    app.worker_main(
        [
            "worker",
            "--pool=threads",
            f"--concurrency={concurrency}",
            f"--loglevel={loglevel}",
            f"--queues={','.join(queues)}",
            f"--hostname={host_queue(name)}@%h",
            "--without-gossip",
            "--without-mingle",
        ]
    )
