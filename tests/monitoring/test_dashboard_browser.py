"""The live dashboard in a real browser, fed by a real host worker through the real server."""

from __future__ import annotations

import time

import pytest

from monitoring.history import minute_key, owners_key, raw_key
from monitoring.models import Host
from tests.support.browser import login
from tests.support.monitoring import SPEC4, unique_host
from tests.support.waiting import BROWSER_WAIT_MS, wait_for

SPEC2 = "2xRTX4090-24GB@pcie"

pytestmark = [pytest.mark.browser, pytest.mark.worker]

POINTS_JS = """(host) => Array.from(
  document.querySelectorAll(`section.host[data-host="${host}"] .chart[data-metric=u]`)
).map((d) => (d.data && d.data[0] ? d.data[0].x.length : -1))"""
CHARTS_JS = """(host) => Array.from(
  document.querySelectorAll(`section.host[data-host="${host}"] .chart`)
).filter((d) => d.data && d.data.length).length"""


def _start(host_worker, name: str):
    return host_worker(
        name, GPU_BACKEND="simulated", SIMULATED_GPUS=SPEC4, HEARTBEAT_INTERVAL_S="1"
    )


def _points(page, host: str) -> list[int]:
    return page.evaluate(POINTS_JS, host)


def _until(page, js: str, arg: object = None) -> None:
    """Wait in the page until `js` holds (bounded for a loaded machine)."""
    page.wait_for_function(js, arg=arg, timeout=BROWSER_WAIT_MS)


def _until_charts_have_points(page, host: str, charts: int) -> None:
    _until(page, f"(host) => ({POINTS_JS})(host).filter((n) => n > 0).length === {charts}", host)


def _all_grew(page, host: str, before: list[int]) -> bool:
    now = _points(page, host)
    return len(now) == len(before) and all(n > b for n, b in zip(now, before, strict=True))


def test_charts_stream_and_reconnect_after_restarts(
    page, asgi_server, host_worker, viewer, host_name
) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    worker = _start(host_worker, host_name)
    wait_for(lambda: Host.objects.filter(name=host_name).exists())
    login(page, asgi_server, viewer.username)
    card = page.locator(f'section.host[data-host="{host_name}"]')
    _until_charts_have_points(page, host_name, 5)
    # 4 GPUs x (util, memory, temp, power), and the host's CPU: utilization and RAM
    assert page.evaluate(CHARTS_JS, host_name) == 18
    assert page.locator("#ws-status").get_attribute("data-state") == "live"

    before = _points(page, host_name)
    wait_for(lambda: _all_grew(page, host_name, before), interval_s=0.1)

    rows = card.locator("table.smi tbody tr")
    assert rows.count() == 5
    assert "NVIDIA H100 80GB HBM3" in rows.nth(0).inner_text()
    assert "simulated" in rows.nth(0).inner_text()
    assert "MiB / 81559MiB" in rows.nth(3).inner_text()
    cpu_row = card.locator("table.smi tbody tr[data-kind=cpu]")
    assert cpu_row.locator("td[data-col=index]").inner_text() == "CPU"
    assert "simulated" not in cpu_row.inner_text()  # the CPU is real on a simulated host
    assert card.locator(".gpu-panel[data-kind=cpu] h3").inner_text().startswith("CPU · ")
    assert card.locator("h2 .badge.sim").inner_text() == "simulated GPUs"
    assert card.locator(".gpu-panel h3 .badge.sim").count() == 4
    assert "simulated" in card.locator(".chart[data-metric=T] .gtitle").first.text_content()

    page.click("button[data-window='1h']")
    page.wait_for_selector("button[data-window='1h'].primary")
    assert "1h" == page.evaluate("window.shardboardGpus.window")

    worker.stop()
    asgi_server.restart()
    _until(page, "document.getElementById('ws-status').dataset.state !== 'live'")
    _start(host_worker, host_name)
    _until(page, "document.getElementById('ws-status').dataset.state === 'live'")
    after = _points(page, host_name)
    wait_for(lambda: _all_grew(page, host_name, after), interval_s=0.2)
    assert card.locator("[data-role=online]").inner_text() == "online"
    assert page.evaluate("window.shardboardGpus.window") == "1h"  # the reconnect kept the window
    assert errors == []


def test_topology_link_from_dashboard(page, asgi_server, viewer) -> None:
    login(page, asgi_server, viewer.username)
    page.click("#topology-link")
    assert page.locator("h1").inner_text() == "GPU topology"
    assert page.locator("dl.legend").is_visible()


def test_a_host_that_registers_later_appears_without_reload(
    page, asgi_server, host_worker, viewer, host_name, redis_client
) -> None:
    late = unique_host("late")
    try:
        _start(host_worker, host_name)
        wait_for(lambda: Host.objects.filter(name=host_name).exists())
        login(page, asgi_server, viewer.username)
        _until_charts_have_points(page, host_name, 5)
        page.evaluate("window.sameDocument = true")
        assert page.locator(f'section.host[data-host="{late}"]').count() == 0

        host_worker(late, GPU_BACKEND="simulated", SIMULATED_GPUS=SPEC2, HEARTBEAT_INTERVAL_S="1")
        _until_charts_have_points(page, late, 3)
        card = page.locator(f'section.host[data-host="{late}"]')
        assert card.locator("table.smi tbody tr").count() == 3  # 2 GPUs and the CPU
        assert "RTX 4090" in card.locator("table.smi tbody tr").nth(0).inner_text()
        assert card.locator("h2 .badge.sim").inner_text() == "simulated GPUs"
        assert page.evaluate("window.sameDocument") is True  # no reload happened
        before = _points(page, late)
        wait_for(lambda: _all_grew(page, late, before), interval_s=0.1)
    finally:
        redis_client.delete(raw_key(late), minute_key(late), owners_key(late))


def test_a_stretch_without_samples_is_a_break_in_the_lines(
    page, asgi_server, viewer, host_name, sim4
) -> None:
    """The worker was down for a minute: the backfill's lines stop and start again."""
    from monitoring.host.worker import history_writer
    from tests.support.monitoring import registered

    registered(host_name, sim4)
    store, now_ms = history_writer(), time.time_ns() // 1_000_000
    for ago_s in (70, 69, 68, 3, 2, 1):
        sample = sim4.sample()
        store.append(host_name, type(sample)(ts_ms=now_ms - ago_s * 1000, gpus=sample.gpus))
    login(page, asgi_server, viewer.username)
    chart = f'section.host[data-host="{host_name}"] .chart[data-metric=u]'
    _until(
        page,
        "(sel) => { const d = document.querySelector(sel); return d && d.data && d.data.length }",
        chart,
    )
    y = page.evaluate("(sel) => document.querySelector(sel).data[0].y", chart)
    assert len(y) == 7 and y[3] is None, y  # one break between the two stretches
    assert all(v is not None for n, v in enumerate(y) if n != 3)
