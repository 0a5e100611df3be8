"""Issue 40's Done-when, in a real browser: the dashboard shows an engine's preparation as its
host worker runs it (step, progress, time, the script's last lines), the launch form says a
launch on it will wait, and the launch does wait (a start step with the preparation's progress)
and then starts on the engine once it is ready, without a reload of the dashboard.

A fake llama.sh stands in for the 6-8 minute build (tests/support/fake_prep.py); once its gate
opens it reports the real llama-server this machine built, so the launch that waited runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from deployments.catalog.gguf_write import convert_demo
from deployments.lifecycle.services import deployment_stop
from deployments.models import Deployment, EnginePrep, LaunchPhase, Phase
from tests.support.browser import login
from tests.support.fake_prep import fake_scripts
from tests.support.live_server import LiveServer
from tests.support.llama_server import server_binary
from tests.support.waiting import BROWSER_WAIT_MS, wait_for
from tests.support.workers import start_sim_worker

# A host worker, a real llama-server start and a browser on a loaded 2-core machine.
pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(300)]
HOST = "prep-e2e"
NAME = "waits-for-llama"
GGUF = "local:0/demo/demo-Q8_0.gguf"


@pytest.fixture
def gguf_root(tiny_model: Path, tmp_path: Path, settings: Any) -> Path:
    """Before the server forks: MODEL_ROOTS holds the demo model as GGUF."""
    root = tmp_path / "models"
    convert_demo(tiny_model, root / "demo" / "demo-Q8_0.gguf")
    settings.MODEL_ROOTS = [root]
    return root


def test_progress_on_the_dashboard_and_a_launch_that_waits_then_starts(
    gguf_root: Path,
    tmp_path: Path,
    host_worker: Any,
    asgi_server: LiveServer,
    page: Any,
    operator: Any,
) -> None:
    binary = server_binary()
    if binary is None:
        pytest.skip("no llama-server built here: run scripts/llama.sh")
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    scripts = fake_scripts(tmp_path / "scripts", {"llamacpp": binary})
    scripts.ready("vllm", "/usr/bin/true")
    scripts.ready("transformers", "/usr/bin/true")
    start_sim_worker(
        host_worker,
        HOST,
        gguf_root,
        SHARDBOARD_ENGINE_SCRIPTS_DIR=str(scripts.folder),
        SHARDBOARD_PREPARE_ENGINES="llamacpp",
    )
    wait_for(
        lambda: EnginePrep.objects.filter(host__name=HOST, engine="llamacpp", done=45).exists()
    )

    # The dashboard: llama.cpp being prepared, with the build's own progress and its last lines.
    login(page, asgi_server, operator.username)
    llama = page.locator(f'[data-engine-prep="{HOST}:llamacpp"]')
    expect(llama.locator("[data-role=state]")).to_have_text("Preparing")
    expect(llama.locator("[data-role=phase]")).to_have_text("Building llama-server (fake)")
    expect(llama.locator("[data-role=progress]")).to_have_text("45 %")
    assert llama.locator("[data-role=bar]").get_attribute("value") == "45"
    expect(llama.locator("[data-role=elapsed]")).to_contain_text("so far")
    # a line that moves no progress reaches the row with the next throttled tail write
    expect(llama.locator("[data-role=log] pre")).to_contain_text("compiling something/file.cpp")
    expect(page.locator(f'[data-engine-prep="{HOST}:vllm"] [data-role=state]')).to_have_text(
        "Ready"
    )
    page.evaluate("window.sameDocument = true")

    # The launch form, in a tab of its own, says that a launch on it will wait.
    form = page.context.new_page()
    form.on("pageerror", lambda exc: errors.append(str(exc)))
    form.goto(
        f"{asgi_server.url}/deployments/new/?name={NAME}&host={HOST}&engine=llamacpp"
        f"&model_ref={GGUF}"
    )
    expect(form.locator("#engine-note")).to_contain_text(
        f"llama.cpp is still being prepared on {HOST} (45 %): a launch now waits for it"
    )
    form.select_option("select[name=engine]", "vllm")
    expect(form.locator("#engine-note")).to_have_text("")
    form.select_option("select[name=engine]", "llamacpp")
    form.click("#launch-form button[type=submit]")
    form.wait_for_url("**/deployments/*/", timeout=BROWSER_WAIT_MS)
    expect(form.locator(".msg.warning")).to_contain_text(
        "llama.cpp is still being prepared on prep-e2e (45 %): the deployment waits for it"
    )
    d = Deployment.objects.get(name=NAME)
    step = form.locator('#launch-steps [data-step="engine"]')
    expect(step).to_have_attribute("data-state", "current")
    expect(step.locator("[data-step-text]")).to_have_text(
        "llama.cpp: Building llama-server (fake) · 45 %"
    )
    assert d.status == "pending"

    # The build ends: the dashboard shows it ready in place, and the launch goes on.
    page.bring_to_front()  # a background tab's page may be starved on a loaded machine
    scripts.open_gate("llamacpp")
    expect(llama.locator("[data-role=state]")).to_have_text("Ready")
    expect(llama.locator("[data-role=elapsed]")).to_contain_text("took")
    assert llama.locator("[data-role=bar]").is_hidden()
    assert page.evaluate("window.sameDocument") is True
    wait_for(lambda: _status(d) in ("running", "failed"), timeout_s=90, interval_s=0.5)
    assert d.status == "running", d.failure_reason
    expect(form.locator("#status")).to_have_text("Running")
    expect(form.locator('#launch-steps [data-step="engine"]')).to_have_attribute(
        "data-state", "done"
    )
    waited = LaunchPhase.objects.get(deployment=d, phase=Phase.ENGINE)
    assert waited.ended_at is not None and waited.duration_s is not None
    assert d.argv[0] == str(binary)
    assert errors == []
    # Stopped, not left to the reaper: the engine's port and CPU go back before the next test.
    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: _status(d) == "stopped", interval_s=0.5)


def _status(d: Deployment) -> str:
    d.refresh_from_db()
    return d.status
