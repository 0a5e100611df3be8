"""Run this machine's host worker: a Celery worker on queue host.<name> that owns its GPUs."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from controlpanel.celery import app, host_queue
from deployments.host import watchdog as deployments_worker  # noqa: F401  (engine watchdog, reconcile)
from monitoring import worker as monitoring_worker  # noqa: F401  (connects its signal handlers)


class Command(BaseCommand):
    help = "Start the Celery host worker for this machine (queue host.<SHARDBOARD_HOST_NAME>)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--name", default=settings.SHARDBOARD_HOST_NAME)
        parser.add_argument("--concurrency", type=int, default=8)
        parser.add_argument("--loglevel", default="INFO")
        parser.add_argument(
            "--no-default-queue",
            action="store_true",
            help="Consume only host.<name>, not the shared default queue.",
        )

    def handle(
        self,
        *args: Any,
        name: str,
        concurrency: int,
        loglevel: str,
        no_default_queue: bool,
        **options: Any,
    ) -> None:
        os.environ["SHARDBOARD_HOST_NAME"] = name
        settings.SHARDBOARD_HOST_NAME = name
        queues = [host_queue(name)] if no_default_queue else [host_queue(name), "default"]
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
