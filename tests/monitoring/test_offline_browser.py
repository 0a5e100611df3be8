"""What a new user sees first on the dashboard is right (issue 40): an offline host says since
when and shows its last samples on a time axis around them, never empty charts with an axis
from January 2000; a chart with no data says why; the host's charts come back live when its
worker does."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring.host.worker import history_writer
from monitoring.models import Host
from tests.support.browser import login
from tests.support.monitoring import registered
from tests.support.waiting import BROWSER_WAIT_MS

pytestmark = [pytest.mark.browser]

X_RANGE = """(sel) => { const d = document.querySelector(sel);
  return d && d._fullLayout ? d._fullLayout.xaxis.range.map((v) => new Date(v).getTime()) : null; }"""


def _card(name: str) -> str:
    return f'section.host[data-host="{name}"]'


def _went_offline(name: str, ago_s: int) -> Host:
    host = Host.objects.get(name=name)
    host.last_heartbeat = timezone.now() - timedelta(seconds=ago_s)
    host.save(update_fields=["last_heartbeat"])
    return host


def test_an_offline_host_shows_since_when_and_its_last_samples(
    page, asgi_server, viewer, host_name, sim4
) -> None:
    registered(host_name, sim4)
    store, now_ms = history_writer(), time.time_ns() // 1_000_000
    last_ms = now_ms - 20 * 60 * 1000  # its worker stopped twenty minutes ago
    for ago_s in range(30, -1, -1):
        sample = sim4.sample()
        store.append(host_name, type(sample)(ts_ms=last_ms - ago_s * 1000, gpus=sample.gpus))
    _went_offline(host_name, 20 * 60)

    login(page, asgi_server, viewer.username)
    card = page.locator(_card(host_name))
    note = card.locator("[data-role=offline-note]")
    note.wait_for()
    assert note.inner_text().startswith("Offline since ")
    assert "The charts show its last samples, up to " in note.inner_text()
    assert card.locator("[data-role=online]").inner_text() == "offline"
    chart = f"{_card(host_name)} .chart[data-metric=u]"
    page.wait_for_function(
        "(sel) => { const d = document.querySelector(sel); return d && d.data && d.data.length }",
        arg=chart,
        timeout=BROWSER_WAIT_MS,
    )
    start_ms, end_ms = page.evaluate(X_RANGE, chart)
    assert last_ms - 60_000 <= start_ms and end_ms <= last_ms + 60_000, (start_ms, end_ms)
    assert len(page.evaluate("(sel) => document.querySelector(sel).data[0].y", chart)) == 31
    assert card.locator(".chart-empty").count() == 0


def test_charts_without_data_say_why(page, asgi_server, viewer, host_name, sim4) -> None:
    registered(host_name, sim4)  # registered, never sampled, then gone
    _went_offline(host_name, 3600)
    login(page, asgi_server, viewer.username)
    card = page.locator(_card(host_name))
    card.locator(".chart-empty").first.wait_for()
    assert card.locator(".chart-empty").count() == 16  # 4 GPUs x 4 charts, none blank
    text = card.locator(".chart[data-metric=u] .chart-empty").first.inner_text()
    assert text.startswith("Utilization (%): No samples: the host has been offline since ")
    assert "No samples of it are kept." in card.locator("[data-role=offline-note]").inner_text()
    assert page.locator(f"{_card(host_name)} .chart .main-svg").count() == 0  # no empty axes


def test_a_metric_the_gpus_do_not_report_says_so(
    page, asgi_server, viewer, host_name, sim4
) -> None:
    registered(host_name, sim4)
    store, now_ms = history_writer(), time.time_ns() // 1_000_000
    for ago_s in range(10, 0, -1):
        sample = sim4.sample()
        gpus = tuple(dataclasses.replace(g, power_mw=None) for g in sample.gpus)
        store.append(host_name, type(sample)(ts_ms=now_ms - ago_s * 1000, gpus=gpus))
    login(page, asgi_server, viewer.username)
    power = page.locator(f"{_card(host_name)} .chart[data-metric=p] .chart-empty").first
    power.wait_for()
    assert power.inner_text() == "Power (W): No power readings: this GPU does not report it."
    assert page.locator(f"{_card(host_name)} .chart[data-metric=u] .chart-empty").count() == 0
