"""The engine log panel and its websocket read Redis and the row only. Here this process plays
the host worker (the real `logship` follower on a file it appends to, as an engine does); real
Redis, the real ASGI application and its live hub."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from controlpanel.asgi import application
from deployments.host import logship
from deployments.live import enginelog
from deployments.models import Deployment, Status
from monitoring.models import Host
from tests.support.monitoring import ORIGIN, ws_headers
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def running(operator: Any, tmp_path: Path) -> Iterator[Deployment]:
    host = Host.objects.create(name="loghost", queue="host.loghost", backend="simulated")
    d = Deployment.objects.create(
        name="chatty",
        model_id="/models/tiny",
        engine="transformers",
        host=host,
        status=Status.RUNNING,
        log_path=str(tmp_path / "engine.log"),
        created_by=operator,
    )
    keys = (enginelog.stream_key(d.pk), enginelog.position_key(d.pk))
    enginelog.client().delete(*keys)  # ids start again in a new test database
    yield d
    logship.finish(d, None)
    enginelog.client().delete(*keys)


def engine_writes(d: Deployment, *lines: str) -> None:
    with Path(d.log_path).open("a") as log:
        log.write("".join(f"{line}\n" for line in lines))


def shipped(d: Deployment, count: int) -> list[enginelog.Line]:
    return wait_for(lambda: len(lines := enginelog.recent(d.pk)) >= count and lines)


async def connect(path: str, headers: list[tuple[bytes, bytes]]) -> tuple[Any, Any]:
    comm = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await comm.connect(timeout=5)
    return comm if connected else None, code


async def test_socket_is_authenticated_and_checked(
    running: Deployment, viewer: Any, outsider: Any
) -> None:
    url = f"/ws/deployments/{running.pk}/log/"
    assert (await connect(url, [ORIGIN]))[1] == 4401
    assert (await connect(url, await ws_headers(outsider)))[1] == 4403
    viewer_headers = await ws_headers(viewer)
    assert (await connect(f"{url}?after=abc", viewer_headers))[1] == 4400
    gone = f"/ws/deployments/{running.pk + 1000}/log/"
    assert (await connect(gone, viewer_headers))[1] == 4404


async def test_backfill_then_live_lines_never_twice(running: Deployment, viewer: Any) -> None:
    d = running
    await sync_to_async(engine_writes)(d, "loading weights", "ready", "GET /health 200")
    stale = {"l": "a line of another deployment that had this id in an earlier database"}
    await sync_to_async(enginelog.client().xadd)(enginelog.stream_key(d.pk), stale)
    await sync_to_async(logship.follow)(d, Path(d.log_path), first=True)
    first = await sync_to_async(shipped)(d, 3)
    headers = await ws_headers(viewer)
    comm, _ = await connect(f"/ws/deployments/{d.pk}/log/", headers)
    backfill = await comm.receive_json_from(timeout=5)
    assert backfill == {"type": "log.lines", "lines": [list(x) for x in first]}
    assert [t for _, t in first] == ["loading weights", "ready", "GET /health 200"]
    key = d.engine_api_key()
    await sync_to_async(engine_writes)(d, f"GET /health?key={key} 200", "POST /v1/completions 200")
    live = await comm.receive_json_from(timeout=5)
    assert [t for _, t in live["lines"]] == ["GET /health?key=*** 200", "POST /v1/completions 200"]
    # A page that reconnects after the third line gets the two after it, and only those.
    again, _ = await connect(f"/ws/deployments/{d.pk}/log/?after={first[-1][0]}", headers)
    assert (await again.receive_json_from(timeout=5))["lines"] == live["lines"]
    await sync_to_async(engine_writes)(d, "one more")
    for socket in (comm, again):
        assert [t for _, t in (await socket.receive_json_from(timeout=5))["lines"]] == ["one more"]
        assert await socket.receive_nothing(timeout=0.3)
        await socket.disconnect()


def test_page_reads_redis_while_active_and_the_row_once_ended(
    running: Deployment, viewer: Any
) -> None:
    d = running
    engine_writes(d, "Uvicorn running on http://127.0.0.1:8000", "<script>alert(1)</script>")
    logship.follow(d, Path(d.log_path))
    lines = shipped(d, 2)
    client = Client()
    client.force_login(viewer)
    page = client.get(f"/deployments/{d.pk}/").content.decode()
    assert "Uvicorn running on http://127.0.0.1:8000\n&lt;script&gt;alert(1)" in page
    assert 'data-live="1"' in page and f'data-last-id="{lines[-1][0]}"' in page
    answer = client.get(f"/deployments/{d.pk}/log/").json()
    assert answer["live"] and answer["last_id"] == lines[-1][0]
    assert answer["log"].splitlines()[0] == "Uvicorn running on http://127.0.0.1:8000"

    engine_writes(d, "Shutting down", f"token {d.engine_api_key()}")
    assert logship.finish(d, Path(d.log_path)).endswith("Shutting down\ntoken ***")
    Deployment.objects.filter(pk=d.pk).update(status=Status.STOPPED)
    enginelog.client().delete(enginelog.stream_key(d.pk))  # expired: the row alone remains
    Path(d.log_path).unlink()  # and nothing on a host's disk could serve the page
    page = client.get(f"/deployments/{d.pk}/").content.decode()
    assert "Shutting down\ntoken ***</pre>" in page and 'data-live=""' in page
    assert "saved when it ended" in page
    answer = client.get(f"/deployments/{d.pk}/log/").json()
    assert not answer["live"] and answer["log"].endswith("Shutting down\ntoken ***")
    assert 0 < enginelog.client().ttl(enginelog.position_key(d.pk)) <= enginelog.ENDED_TTL_S


def test_panel_for_nobody(running: Deployment, outsider: Any, client: Client) -> None:
    assert client.get(f"/deployments/{running.pk}/log/").status_code in (302, 403)
    client.force_login(outsider)
    assert client.get(f"/deployments/{running.pk}/log/").status_code == 403
