"""Engine output from another machine, with real parts: a real Celery host worker with a var
directory of its own runs the tiny model under `transformers serve`; the web server (uvicorn,
the test's var directory) shows the engine's lines from Redis, on load and live over the
websocket (a websocket client, then a real browser); once stopped, the tail saved in the
database. Nothing of the host's disk is shared with the web server but what the host ships.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from websockets.sync.client import connect

from deployments import planning
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import Deployment
from tests.support.browser import login
from tests.support.gateway import session_for
from tests.support.live_server import LiveServer
from tests.support.waiting import BROWSER_WAIT_MS, wait_for
from tests.support.workers import WorkerProcess, start_sim_worker

pytestmark = [pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(300)]
HOST = "farhost"
HUB_LIKE_TOKEN = "hf_" + "Q7" * 15


def far_worker(host_worker: Any, model_root: Path, tmp_path: Path) -> tuple[WorkerProcess, Path]:
    """A host worker as on a second machine: its own var directory; what two machines share
    is the database, Redis and the configured SECRET_KEY."""
    host_var = tmp_path / "far-host-var"
    worker = start_sim_worker(
        host_worker,
        HOST,
        model_root,
        SHARDBOARD_VAR_DIR=str(host_var),
        SECRET_KEY=settings.SECRET_KEY,
    )
    return worker, host_var


def running(operator: Any, worker: WorkerProcess, name: str) -> Deployment:
    d = deployment_create(
        user=operator,
        request=LaunchRequest(
            name=name,
            model_ref="local:0/tiny",
            host_name=HOST,
            engine="transformers",
            plan_request=planning.PlanRequest(),
        ),
    )
    try:
        wait_for(lambda: Deployment.objects.get(pk=d.pk).status in ("running", "failed"), 120)
    except AssertionError:
        print(worker.log())
        raise
    d.refresh_from_db()
    assert d.status == "running", d.failure_reason
    return d


def engine_logs(d: Deployment, marker: str) -> None:
    """The engine's access log writes a line with the query string; the key must be masked."""
    query = {"seen": marker, "key": d.engine_api_key(), "hub": HUB_LIKE_TOKEN}
    assert httpx.get(f"{d.base_url}/health", params=query, timeout=10).status_code == 200


def stopped(operator: Any, d: Deployment) -> Deployment:
    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: Deployment.objects.get(pk=d.pk).status == "stopped", interval_s=0.2)
    d.refresh_from_db()
    return d


def test_lines_reach_the_web_server_from_another_host(
    host_worker: Any,
    model_root: Path,
    asgi_server: LiveServer,
    operator: Any,
    viewer: Any,
    tmp_path: Path,
) -> None:
    worker, host_var = far_worker(host_worker, model_root, tmp_path)
    d = running(operator, worker, "far")
    assert Path(d.log_path).is_relative_to(host_var)
    assert not Path(d.log_path).is_relative_to(settings.VAR_DIR)
    cookies, _ = session_for(viewer)
    log_url = f"{asgi_server.url}/deployments/{d.pk}/log/"
    first = wait_for(
        lambda: (
            "Uvicorn running on" in (j := httpx.get(log_url, cookies=cookies).json())["log"] and j
        )
    )
    assert first["live"] and first["last_id"]
    assert first["log"].count("Uvicorn running on") == 1  # this engine's lines only
    page = httpx.get(f"{asgi_server.url}/deployments/{d.pk}/", cookies=cookies).text
    assert "Uvicorn running on" in page and 'data-live="1"' in page

    ws_url = f"{asgi_server.ws_url}/ws/deployments/{d.pk}/log/"
    headers = {"Cookie": f"sessionid={cookies['sessionid']}"}
    with connect(ws_url, additional_headers=headers, origin="http://127.0.0.1") as ws:
        backfill = json.loads(ws.recv(timeout=5))
        assert any("Uvicorn running on" in text for _, text in backfill["lines"])
        marker = uuid.uuid4().hex
        engine_logs(d, marker)
        seen: list[str] = []
        while not any(marker in text for text in seen):
            seen += [text for _, text in json.loads(ws.recv(timeout=10))["lines"]]
    line = next(text for text in seen if marker in text)
    assert "key=***" in line and "hub=***" in line, line
    assert d.engine_api_key() not in line and HUB_LIKE_TOKEN not in line

    d = stopped(operator, d)
    assert marker in d.log_tail and "Shutting down" in d.log_tail
    assert d.engine_api_key() not in d.log_tail and HUB_LIKE_TOKEN not in d.log_tail
    page = httpx.get(f"{asgi_server.url}/deployments/{d.pk}/", cookies=cookies).text
    assert marker in page and 'data-live=""' in page and "saved when it ended" in page
    ended = httpx.get(log_url, cookies=cookies).json()
    assert not ended["live"] and ended["log"] == d.log_tail


@pytest.mark.browser
def test_detail_page_shows_the_engine_lines_live(
    host_worker: Any,
    model_root: Path,
    asgi_server: LiveServer,
    page: Any,
    operator: Any,
    tmp_path: Path,
) -> None:
    worker, _ = far_worker(host_worker, model_root, tmp_path)
    d = running(operator, worker, "far-live")
    login(page, asgi_server, operator.username)
    page.goto(f"{asgi_server.url}/deployments/{d.pk}/")
    started = "() => document.getElementById('log').textContent.includes('Uvicorn')"
    page.wait_for_function(started, timeout=BROWSER_WAIT_MS)
    page.evaluate("() => { window.notReloaded = true; }")
    marker = uuid.uuid4().hex
    engine_logs(d, marker)
    shipped = f"() => document.getElementById('log').textContent.includes('{marker}')"
    page.wait_for_function(shipped, timeout=BROWSER_WAIT_MS)
    assert page.evaluate("() => window.notReloaded === true")  # arrived live, not by a reload
    text = page.locator("#log").text_content()
    assert d.engine_api_key() not in text and HUB_LIKE_TOKEN not in text
    assert text.count("Uvicorn running on") == 1 and text.count(marker) == 1
    page.screenshot(path=str(tmp_path / "detail-live-log.png"), full_page=True)

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#stop-button")
    wait_for(lambda: Deployment.objects.get(pk=d.pk).status == "stopped", interval_s=0.2)
    # The status push reloads the page; an ended deployment's panel is the tail from the row.
    page.wait_for_function(
        f"""() => {{ const log = document.getElementById('log');
            return log.dataset.live === '' && log.textContent.includes('{marker}'); }}""",
    )
    assert "saved when it ended" in page.locator("#log-note").inner_text()
