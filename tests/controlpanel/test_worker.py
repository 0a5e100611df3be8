"""A task sent to a running Celery host worker process, and its result received."""

import pytest

from controlpanel.celery import host_queue
from controlpanel.tasks import ping

pytestmark = [pytest.mark.worker]


def test_ping_round_trip(host_worker) -> None:
    worker = host_worker("pinghost")
    result = ping.apply_async(args=["hello"], queue=host_queue("pinghost"))
    try:
        answer = result.get(timeout=60)
    except Exception:
        print(worker.log())
        raise
    assert answer["pong"] == "hello"
