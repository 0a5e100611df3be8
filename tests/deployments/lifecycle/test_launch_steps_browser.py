"""A real browser on the page of a Hub model being launched: the download's progress bar moves
live, then the steps of transformers serve's start follow, each with the time it took."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import Deployment
from tests.support.browser import login
from tests.support.hubstub import HubStub
from tests.support.hubstub.served import BIG, MIB
from tests.support.live_server import LiveServer
from tests.support.waiting import wait_for
from tests.support.workers import start_fetch_worker

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(240)]
HOST = "stepshost"


def test_steps_while_transformers_serve_starts(
    served: HubStub,
    host_worker: Any,
    model_root: Path,
    asgi_server: LiveServer,
    page: Any,
    operator: Any,
    tmp_path: Path,
) -> None:
    worker = start_fetch_worker(host_worker, HOST, model_root, served.url, tmp_path / "hf")
    served.throttle_bps = 6 * MIB  # 48 MiB: about 8 s of download to watch
    login(page, asgi_server, operator.username)
    request = LaunchRequest(name="watched", model_ref=BIG, host_name=HOST, engine="transformers")
    d = deployment_create(user=operator, request=request)
    page.goto(f"{asgi_server.url}/deployments/{d.pk}/")

    downloading = "#launch-steps [data-step=downloading]"
    page.wait_for_selector(f"{downloading}[data-state=current]")
    bar = "#launch-steps [data-step-bar=downloading]"
    first = page.eval_on_selector(bar, "b => b.value")
    page.wait_for_function(
        f"v => document.querySelector('{bar}').value > v + {2 * MIB}", arg=first
    )  # moved without a reload
    text = page.locator("#launch-steps [data-step-text=downloading]").inner_text()
    assert re.search(r"[\d.]+ MiB of [\d.]+ MiB · [\d.]+ MiB/s", text), text

    try:
        page.wait_for_selector("#launch-steps [data-step=ready][data-state=done]", timeout=120_000)
    except Exception:
        print(worker.log()[-5000:])
        raise
    assert Deployment.objects.get(pk=d.pk).status == "running"
    page.wait_for_selector("#status.status-running")
    for step in ("downloading", "loading", "warming_up"):
        row = page.locator(f"#launch-steps [data-step={step}]")
        assert row.get_attribute("data-state") == "done", step
        assert re.search(r"\d+\.\d s", row.inner_text()), row.inner_text()
    # vLLM's profiling and CUDA graphs are not steps of transformers serve: never entered.
    for step in ("profiling", "cuda_graphs"):
        assert (
            page.locator(f"#launch-steps [data-step={step}]").get_attribute("data-state")
            == "waiting"
        )
    page.screenshot(path=str(tmp_path / "steps.png"), full_page=True)

    # The list shows no progress once running; the next launch of the model expects a time.
    deployment_stop(user=operator, deployment=Deployment.objects.get(pk=d.pk))
    wait_for(lambda: Deployment.objects.get(pk=d.pk).status == "stopped")
    again = deployment_create(
        user=operator,
        request=LaunchRequest(
            name="watched-again", model_ref=BIG, host_name=HOST, engine="transformers"
        ),
    )
    page.goto(f"{asgi_server.url}/deployments/{again.pk}/")
    page.wait_for_selector("#launch-steps [data-step=ready][data-state=done]", timeout=120_000)
    assert "expected" in page.locator("#launch-steps [data-step=loading]").inner_text()
    assert page.locator("#steps-expected").inner_text().startswith("about ")
    deployment_stop(user=operator, deployment=Deployment.objects.get(pk=again.pk))
    wait_for(lambda: Deployment.objects.get(pk=again.pk).status == "stopped")
