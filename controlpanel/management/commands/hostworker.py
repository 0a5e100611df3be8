"""Run this machine's host worker: a Celery worker on queue host.<name> that owns its GPUs.

The command only parses its arguments: the worker itself is host code
(``controlpanel.host.worker``), the one import of host code outside a ``host`` package.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from controlpanel.host import worker


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
        worker.run(
            name=name,
            concurrency=concurrency,
            loglevel=loglevel,
            default_queue=not no_default_queue,
        )
