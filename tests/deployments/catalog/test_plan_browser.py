"""The main path in a real browser: a model page planned on a registered host, every field of
the plan panel changed, then Launch; the same panel on an offline host and a what-if fleet;
a model spanning two hosts, launched. Any page error or console error fails the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deployments.models import Deployment, GpuLease, RayNode
from monitoring.models import Gpu, Host
from tests.support.browser import login
from tests.support.catalog import BIG, GIB
from tests.support.hosts import sim_host
from tests.support.live_server import LiveServer
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.browser, pytest.mark.worker]
HOST = "planhost"
KV = "Number(document.getElementById('kv-tokens').dataset.value)"
BARS = "document.getElementById('plan-chart').data"


@pytest.fixture
def errors(page: Any) -> Iterator[list[str]]:
    """Every uncaught exception and console error of the page; the test asserts it stays empty."""
    seen: list[str] = []
    page.on("pageerror", lambda exc: seen.append(f"pageerror: {exc}"))
    page.on("console", lambda m: seen.append(f"console: {m.text}") if m.type == "error" else None)
    yield seen


def offline_host() -> Host:
    """A host whose worker went away: first by name, so a by-name default would pick it."""
    host = Host.objects.create(name="aaa-gone", queue="host.aaa-gone", backend="nvml")
    for index in range(8):
        Gpu.objects.create(
            host=host,
            index=index,
            uuid=f"GPU-gone-{index}",
            name="H100",
            memory_total_bytes=80 * GIB,
        )
    return host


def replanned(page: Any, action: Any) -> None:
    """Run `action` and wait until the panel has drawn the answer to it."""
    before = page.evaluate(
        "() => Number(document.getElementById('plan-result').dataset.revision || 0)"
    )
    action()
    page.wait_for_function(
        f"() => Number(document.getElementById('plan-result').dataset.revision || 0) > {before}"
    )


def layout(page: Any) -> str:
    return page.locator("#plan-layout").inner_text()


def launch_value(page: Any, name: str) -> str:
    return page.locator(f"#launch-form input[name={name}]").get_attribute("value") or ""


def test_hub_model_on_a_registered_host(
    host_worker: Any,
    model_root: Path,
    live: LiveServer,
    page: Any,
    operator: Any,
    errors: list[str],
) -> None:
    offline_host()
    start_sim_worker(host_worker, HOST, model_root)
    login(page, live, operator.username)
    page.goto(f"{live.url}/models/{BIG}/")
    page.wait_for_function(f"() => {BARS} !== undefined")

    # The online host with the most free GPUs is the default, not the first by name.
    assert page.locator("#plan-target-select").input_value() == HOST
    assert layout(page).startswith("TP 4 × PP 1")  # the full 131,072 tokens, not TP 1 clipped
    assert page.locator("#plan-context").inner_text() == "131072 tokens"
    assert "TP 1 × PP 1 would clip it" in page.locator("#plan-reason").inner_text()
    offer = page.locator("#plan-clip")
    clipped = int(page.locator("#plan-clip-use").get_attribute("data-len") or 0)
    assert 4096 < clipped < 131072
    assert offer.is_visible() and f"at most {clipped:,} tokens on 1 GPU" in offer.inner_text()
    assert page.locator("#launch-button").is_enabled()

    kv_full = page.evaluate(KV)
    replanned(page, lambda: page.fill("#plan-form input[name=max_model_len]", "32768"))
    assert page.evaluate(KV) != kv_full and launch_value(page, "max_model_len") == "32768"
    assert page.locator("#launch-button").is_enabled()

    kv_auto = page.evaluate(KV)
    replanned(page, lambda: page.select_option("#plan-form select[name=kv_cache_dtype]", "fp8"))
    assert page.evaluate(KV) > 1.5 * kv_auto
    assert launch_value(page, "kv_cache_dtype") == "fp8"

    replanned(page, lambda: page.select_option("#plan-form select[name=dtype]", "float16"))
    assert launch_value(page, "dtype") == "float16"

    replanned(page, lambda: page.fill("#plan-form input[name=tensor_parallel_size]", "2"))
    assert (
        layout(page).startswith("TP 2 × PP 1") and launch_value(page, "tensor_parallel_size") == "2"
    )
    assert len(page.evaluate(f"{BARS}[0].y")) == 2  # one bar per GPU of the replica
    assert page.locator("#launch-button").is_enabled()

    # Back to the model's context: the explicit shorter choice is one click.
    replanned(page, lambda: page.fill("#plan-form input[name=tensor_parallel_size]", ""))
    replanned(page, lambda: page.fill("#plan-form input[name=max_model_len]", ""))
    replanned(page, lambda: page.select_option("#plan-form select[name=kv_cache_dtype]", "auto"))
    replanned(page, lambda: page.select_option("#plan-form select[name=dtype]", "auto"))
    clipped = int(page.locator("#plan-clip-use").get_attribute("data-len") or 0)
    replanned(page, lambda: page.click("#plan-clip-use"))
    assert page.locator("#plan-form input[name=max_model_len]").input_value() == str(clipped)
    assert page.locator("#plan-form input[name=tensor_parallel_size]").input_value() == "1"
    assert layout(page).startswith("TP 1 × PP 1") and launch_value(page, "max_model_len") == str(
        clipped
    )

    # An offline host is planned on when asked, says so, and cannot be launched on.
    replanned(page, lambda: page.select_option("#plan-target-select", "aaa-gone"))
    assert "aaa-gone is offline" in page.locator("#plan-notice").inner_text()
    assert page.locator("#launch-button").is_disabled()
    assert page.locator("#launch-note").inner_text() == "The host is offline."

    # A what-if fleet.
    replanned(page, lambda: page.select_option("#plan-target-select", "whatif"))
    replanned(page, lambda: page.fill("#plan-form input[name=gpus]", "8x80GiB@nvlink"))
    replanned(page, lambda: page.fill("#plan-form input[name=max_model_len]", ""))
    replanned(page, lambda: page.fill("#plan-form input[name=tensor_parallel_size]", ""))
    replanned(page, lambda: page.fill("#plan-form input[name=pipeline_parallel_size]", ""))
    assert "room for 2 replicas" in layout(page) and page.locator("#plan-notice").is_hidden()
    assert page.locator("#launch-button").is_disabled()

    # A stated load sizes each GPU's share, and the panel says what stays free beside it.
    assert page.locator("#plan-shares li").all_inner_texts()[0].startswith("Reserves ")
    replanned(page, lambda: page.fill("#plan-form input[name=max_model_len]", "8192"))
    replanned(page, lambda: page.fill("#plan-form input[name=concurrency]", "8"))
    shares = page.locator("#plan-shares li").all_inner_texts()
    assert shares[0].startswith("Sized for 8 requests of 8,192 tokens at once"), shares
    assert shares[1].endswith("stays free for other deployments."), shares
    assert "--gpu-memory-utilization 0.92 " not in page.locator("#cmd-vllm").inner_text()
    replanned(page, lambda: page.fill("#plan-form input[name=concurrency]", ""))
    replanned(page, lambda: page.fill("#plan-form input[name=max_model_len]", ""))

    # Three replicas: TP 4 places only two on eight GPUs, so TP 2, listed replica by replica.
    replanned(page, lambda: page.fill("#plan-form input[name=replicas]", "3"))
    assert layout(page) == "TP 2 × PP 1, 3 of 3 replicas placed"
    assert page.locator("#plan-replicas li").all_inner_texts() == [
        "replica 1: what-if GPUs 0, 1",
        "replica 2: what-if GPUs 2, 3",
        "replica 3: what-if GPUs 4, 5",
    ]
    replanned(page, lambda: page.fill("#plan-form input[name=replicas]", ""))
    assert (
        page.locator("#plan-replicas li").count() == 2 and page.locator("#plan-tight").is_hidden()
    )

    # At gpu_memory_utilization 1 nothing is left outside the budget: a tight fit, said so.
    replanned(page, lambda: page.fill("#plan-form input[name=gpu_memory_utilization]", "1"))
    assert layout(page).endswith("(tight)")
    assert page.locator("#plan-tight").inner_text().startswith("Tight fit: vLLM should start")
    assert "fits only within the planner's margin" in page.locator("tr.chosen").inner_text()
    replanned(page, lambda: page.fill("#plan-form input[name=gpu_memory_utilization]", ""))
    assert page.locator("#plan-tight").is_hidden()

    # Back on the host, Launch: a simulated host serves local models only, and says so.
    replanned(page, lambda: page.select_option("#plan-target-select", HOST))
    assert page.locator("#launch-button").is_enabled()
    page.click("#launch-button")
    page.wait_for_selector(".msg.error")
    assert "serves local models only" in page.locator(".msg.error").inner_text()
    assert not Deployment.objects.exists()
    assert errors == []


@pytest.mark.timeout(300)  # a real transformers serve start and stop: 53 s here, more on CI
def test_local_model_plan_launch_running_stop(
    host_worker: Any,
    model_root: Path,
    live: LiveServer,
    page: Any,
    operator: Any,
    errors: list[str],
) -> None:
    start_sim_worker(host_worker, HOST, model_root)
    login(page, live, operator.username)
    page.goto(f"{live.url}/models/local/0/tiny/")
    page.wait_for_function(f"() => {BARS} !== undefined")
    assert page.locator("#plan-target-select").input_value() == HOST
    replanned(page, lambda: page.fill("#plan-form input[name=max_model_len]", "256"))
    replanned(page, lambda: page.select_option("#plan-form select[name=dtype]", "float32"))
    assert page.locator("#plan-context").inner_text() == "256 tokens"
    assert launch_value(page, "max_model_len") == "256"
    page.fill("#launch-form input[name=name]", "tiny-browser")
    page.click("#launch-button")
    page.wait_for_url("**/deployments/*/")
    d = Deployment.objects.get(name="tiny-browser")
    assert d.snapshot.engine_args.max_model_len == 256
    wait_for(lambda: Deployment.objects.get(pk=d.pk).status in ("running", "failed"), 120)
    d.refresh_from_db()
    assert d.status == "running", d.failure_reason
    page.wait_for_function("() => document.getElementById('status').textContent === 'Running'")
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#stop-button")
    wait_for(lambda: Deployment.objects.get(pk=d.pk).status == "stopped")
    assert errors == []


def test_a_what_if_fleet_of_64_gpus_answers(
    live: LiveServer, page: Any, viewer: Any, errors: list[str]
) -> None:
    """Eight 8-GPU hosts, planned from the browser: the page answers (the default timeout is
    10 s; a search that grew with the GPU subsets took minutes here) and names each rank's host."""
    login(page, live, viewer.username)
    page.goto(f"{live.url}/models/{BIG}/")
    page.wait_for_function(f"() => {BARS} !== undefined")
    assert page.locator("#plan-target-select").input_value() == "whatif"  # no host registered
    replanned(page, lambda: page.fill("#plan-form input[name=gpus]", "8x8x80GiB@nvlink"))
    assert layout(page).startswith("TP 4 × PP 1") and "room for 16 replicas" in layout(page)
    rows = page.locator("#plan-replicas li").all_inner_texts()
    assert rows[0].startswith("replica 1: what-if-1 GPUs") and len(rows) == 16
    assert any(r.startswith("replica 2: what-if-2") for r in rows)  # spread over the hosts
    assert errors == []


def test_a_model_too_large_for_each_host_spans_the_fleet(
    model_roots: dict[str, Path],
    live: LiveServer,
    page: Any,
    operator: Any,
    errors: list[str],
) -> None:
    """Two online hosts (rows only) with one 12 GiB GPU each; a local 7B model in bfloat16 fits
    neither alone. The page plans it over all online hosts in two pipeline stages, one per host,
    picked hosts and what-if GPUs are a select away, and Launch
    leases a GPU on each and writes their Ray nodes (no worker: nothing starts)."""
    for name in ("fleet-a", "fleet-b"):
        sim_host(name, 1, 12 * GIB)
    # GPU hosts: over simulated GPUs vLLM runs on the CPU, which cannot span hosts (Ray), and
    # the page says so in place of Launch (test_plan_fleet.py)
    Host.objects.filter(name__in=("fleet-a", "fleet-b")).update(simulated=False)
    login(page, live, operator.username)
    page.goto(f"{live.url}/models/local/0/qwen-local/")
    page.wait_for_function(f"() => {BARS} !== undefined")
    # No host alone holds it: the page offers the plan over every online host.
    assert page.locator("#plan-target-select").input_value() == "fleet"
    assert layout(page).startswith("TP 1 × PP 2")
    assert page.locator("#plan-stages li").all_inner_texts() == [
        "stage 1: fleet-a GPU 0, layers 0–13 (Ray head, runs the engine)",
        "stage 2: fleet-b GPU 0, layers 14–27 (Ray worker)",
    ]
    assert page.locator("#hosts-label").is_hidden()
    assert launch_value(page, "host") == "fleet-a" and launch_value(page, "hosts") == "fleet-b"
    assert "Ray cluster of its own" in page.locator("#launch-note").inner_text()
    assert page.locator("#launch-button").is_enabled()

    # Picking hosts starts from the online ones; a plan on one host sends no further hosts.
    replanned(page, lambda: page.select_option("#plan-target-select", "picked"))
    assert page.locator("#hosts-label").is_visible()
    assert page.locator("#plan-target").inner_text() == "hosts fleet-a, fleet-b"
    assert page.locator("#plan-stages li").count() == 2
    assert page.locator("#launch-form input[name=hosts]").count() == 1
    replanned(page, lambda: page.select_option("#plan-target-select", "whatif"))
    assert page.locator("#launch-form input[name=hosts]").count() == 0
    assert page.locator("#plan-stages li").count() == 0 and page.locator("#hosts-label").is_hidden()
    replanned(page, lambda: page.select_option("#plan-target-select", "fleet"))
    assert launch_value(page, "hosts") == "fleet-b"

    page.fill("#launch-form input[name=name]", "spans-hosts")
    page.click("#launch-button")
    page.wait_for_url("**/deployments/*/")
    d = Deployment.objects.get(name="spans-hosts")
    assert d.host.name == "fleet-a" and d.spans_hosts
    leased = GpuLease.objects.filter(deployment=d, active=True)
    assert sorted(leased.values_list("gpu__host__name", flat=True)) == ["fleet-a", "fleet-b"]
    nodes = RayNode.objects.filter(deployment=d).order_by("role")
    assert [(n.host.name, n.role) for n in nodes] == [("fleet-a", "head"), ("fleet-b", "worker")]
    assert errors == []
