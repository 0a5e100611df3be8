"""A real browser on the benchmark pages: the charts of a recorded run (its GPUs from the
monitoring history in Redis), a comparison of two runs on one chart, the deployment page's
section, and progress pushed to an open page over the websocket."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from benchmarks import events
from benchmarks.models import BenchmarkRun
from tests.support.browser import login

pytestmark = pytest.mark.browser


def traces(page: Any, chart: str) -> list[dict[str, Any]]:
    page.wait_for_selector(f"#{chart} .main-svg")
    return page.evaluate(
        """id => document.getElementById(id).data.map(t => ({name: t.name, n: t.y.length,
            type: t.type, points: t.y.filter(v => v !== null).length}))""",
        chart,
    )


def test_run_charts_and_a_comparison(
    page, asgi_server, make_deployment, recorded_run, viewer
) -> None:
    one, two = make_deployment("tp1"), make_deployment("tp2", tp=2)
    a, b = recorded_run(one, "tp1 run"), recorded_run(two, "tp2 run", speed=2.0)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc}"))
    page.on(
        "console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None
    )
    login(page, asgi_server, viewer.username)
    page.goto(f"{asgi_server.url}/benchmarks/{a.pk}/")
    assert page.locator("#simulated-badge").is_visible()
    assert "simulated" in page.locator("#simulated-note").inner_text()
    assert [t["name"] for t in traces(page, "chart-throughput")] == ["output tok/s", "requests/s"]
    assert all(t["points"] == 3 for t in traces(page, "chart-throughput"))
    latency = traces(page, "chart-latency")
    assert {t["name"] for t in latency} >= {"TTFT p50", "TTFT p95", "TTFT p99", "ITL p95"}
    assert [t["type"] for t in traces(page, "chart-ttft")] == ["bar"] * 3
    gpu_util = traces(page, "chart-gpu-util")
    assert [t["name"] for t in gpu_util] == ["GPU0"] and gpu_util[0]["points"] >= 9
    assert "(simulated GPUs)" in page.locator("#chart-gpu-util").inner_text()
    assert page.locator("#readings .reading").count() == 3
    assert page.locator("#export-json").get_attribute("href") == f"/benchmarks/{a.pk}/export/"

    page.select_option("#compare-form select[name=b]", str(b.pk))
    page.click("#compare-form button[type=submit]")
    page.wait_for_url(f"**/benchmarks/compare/?a={a.pk}&b={b.pk}")
    both = traces(page, "compare-throughput")
    assert [t["name"] for t in both] == ["tp1 run", "tp2 run"]
    assert all(t["points"] == 3 for t in both)
    assert len(traces(page, "compare-latency")) == 4
    assert page.locator(".compare-run").count() == 2

    page.goto(f"{asgi_server.url}/deployments/{one.pk}/")
    page.wait_for_selector("#benchmarks [data-col=sustained]")
    assert "tp1 run" in page.locator("#benchmarks").inner_text()
    page.click("#benchmarks-link")
    page.wait_for_selector("#benchmark-runs")
    assert page.locator("#benchmark-form").count() == 0  # a viewer sees runs, not the form
    assert errors == []


def test_progress_is_pushed_to_an_open_page(
    page, asgi_server, make_deployment, operator, viewer
) -> None:
    d = make_deployment()
    run = BenchmarkRun.objects.create(
        deployment=d,
        workload={"levels": [1, 2], "prompt": {"mean": 5}, "output": {"mean": 5}},
        layout={"host": d.host.name, "gpu_indices": [0], "simulated": True},
        created_by=operator,
    )
    login(page, asgi_server, viewer.username)
    page.goto(f"{asgi_server.url}/benchmarks/{run.pk}/")
    page.wait_for_timeout(1000)  # the websocket joins its group
    run.transition("running", progress={"level": 1, "load": 2, "done": 7, "failed": 1})
    pusher = threading.Thread(target=events.publish, args=(run,))  # as the host task does:
    pusher.start()  # off this thread, whose event loop is Playwright's
    pusher.join()
    page.wait_for_function(
        "() => document.getElementById('progress').textContent.includes('7 answered, 1 failed')"
    )
    assert page.locator("#run-status").inner_text() == "Running"
