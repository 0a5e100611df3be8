"""A real browser on the detail page of a real deployment: planned vs measured memory fills in
from monitoring, then the engine is killed and the page says so without a reload by hand."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from deployments import planning
from deployments.lifecycle.services import LaunchRequest, deployment_create
from deployments.models import Deployment, GpuLease
from tests.support.browser import login
from tests.support.live_server import LiveServer
from tests.support.waiting import BROWSER_WAIT_MS, wait_for
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.engine]
HOST = "browserhost"


def assert_fits_the_viewport(page: Any, shots: Path) -> None:
    """Nothing wider than the window (no clipped right column), at a desktop and a laptop size."""
    for width, height in ((1400, 900), (1000, 800)):
        page.set_viewport_size({"width": width, "height": height})
        page.screenshot(path=str(shots / f"detail-{width}x{height}.png"), full_page=True)
        overflow = page.evaluate(
            """() => ({scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
                wide: [...document.querySelectorAll('main *')]
                    .filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)
                    .filter(e => !e.closest('.table-scroll, pre'))
                    .map(e => e.tagName + '#' + e.id + '.' + e.className).slice(0, 5)})"""
        )
        assert overflow["scroll"] <= overflow["inner"], overflow
        assert overflow["wide"] == [], overflow
    kv_tokens = page.locator("#kv-tokens").inner_text()
    assert re.fullmatch(r"\d{1,3}(,\d{3})*", kv_tokens), kv_tokens  # thousands separators


@pytest.mark.timeout(300)  # a real transformers serve start: 42 s here, more on CI
def test_memory_table_and_live_failure(
    host_worker: Any,
    model_root: Any,
    asgi_server: LiveServer,
    page: Any,
    operator: Any,
    tmp_path: Path,
) -> None:
    worker = start_sim_worker(host_worker, HOST, model_root)
    d = deployment_create(
        user=operator,
        request=LaunchRequest(
            name="seen",
            model_ref="local:0/tiny",
            host_name=HOST,
            engine="transformers",
            plan_request=planning.PlanRequest(),
        ),
    )
    try:
        wait_for(
            lambda: Deployment.objects.get(pk=d.pk).status in ("running", "failed"), timeout_s=120
        )
    except AssertionError:
        print(worker.log())
        raise
    d.refresh_from_db()
    assert d.status == "running", d.failure_reason
    lease = GpuLease.objects.get(deployment=d, active=True)
    planned = f"{lease.memory_bytes / (1 << 30):,.2f} GiB"

    login(page, asgi_server, operator.username)
    page.goto(f"{asgi_server.url}/deployments/{d.pk}/")
    row = f"#memory tr[data-gpu='{lease.gpu.index}']"
    assert page.locator(f"{row} td[data-col=planned]").inner_text() == planned
    # The script rebuilds the rows every 5 s: mark the server-rendered ones, wait for new ones.
    page.evaluate(
        "() => document.querySelectorAll('#memory tbody tr').forEach(r => r.dataset.old = 1)"
    )
    page.wait_for_function(
        f"""() => {{
            const cell = document.querySelector("{row}:not([data-old]) td[data-col=measured]");
            return cell !== null && cell.textContent === '{planned}';
        }}""",
    )
    assert page.locator(f"{row} td[data-col=difference]").inner_text() == "+0.00 GiB"
    assert_fits_the_viewport(page, tmp_path)

    os.killpg(d.pgid, signal.SIGKILL)
    page.wait_for_selector("#diagnosis", timeout=BROWSER_WAIT_MS)  # a status push reloads it
    assert page.locator("#status").inner_text() == "Failed"
    assert "exited unexpectedly" in page.locator("#diagnosis").inner_text()
