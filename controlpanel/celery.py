"""The Celery app. Web enqueues; each GPU machine's host worker consumes `host.<name>`."""

from __future__ import annotations

import os
import re

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")

app = Celery("shardboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
# The packages whose `tasks` modules hold tasks (the web sends them by name and imports none).
app.autodiscover_tasks(["controlpanel", "deployments.host", "benchmarks.host", "teams.host"])

_QUEUE_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def host_queue(host_name: str) -> str:
    """The queue a host's worker consumes; the name is sanitised for Redis and group names."""
    return f"host.{_QUEUE_UNSAFE.sub('-', host_name)}"
