"""Issue 31's Done-when, exactly, in a real browser: a new user picks the demo model as a local
GGUF, sees a two-GPU layer split with unequal -ts ratios on the what-if pair of cards, launches
it from the plan panel on this machine's llama-server (a real host worker), chats with it in
the playground and through /v1/ with the OpenAI SDK, and stops it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from controlpanel.models import AuditEvent
from deployments.catalog.gguf_write import convert_demo
from deployments.models import Deployment, GpuLease
from playground import services as playground_services
from playground.models import PlaygroundRun
from tests.support.browser import login
from tests.support.live_server import LiveServer
from tests.support.llama_server import server_binary
from tests.support.waiting import BROWSER_WAIT_MS, wait_for
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(300)]
HOST = "gguf-e2e"
TWO_GPUS = "1x24GiB@pcie,1x16GiB@pcie"
GGUF_PAGE = "/models/gguf/local/0/demo/demo-Q8_0.gguf/"
REVISION = "() => Number(document.getElementById('plan-result').dataset.revision || 0)"
NAME = "demo-gguf"


@pytest.fixture
def demo_root(tiny_model: Path, tmp_path: Path, settings: Any) -> Path:
    """Before the server forks: MODEL_ROOTS holds the demo model as GGUF."""
    root = tmp_path / "models"
    convert_demo(tiny_model, root / "demo" / "demo-Q8_0.gguf")
    settings.MODEL_ROOTS = [root]
    return root


@pytest.fixture
def errors(page: Any) -> Iterator[list[str]]:
    seen: list[str] = []
    _watch(page, seen)
    yield seen


def _watch(page: Any, seen: list[str]) -> None:
    page.on("pageerror", lambda exc: seen.append(f"pageerror: {exc}"))
    page.on("console", lambda m: seen.append(f"console: {m.text}") if m.type == "error" else None)


def _replanned(page: Any, action: Any) -> None:
    """Do `action` and wait until the panel has drawn the plan it asked for."""
    before = page.evaluate(REVISION)
    action()
    wait_for(lambda: page.evaluate(REVISION) > before)


def test_pick_split_launch_chat_sdk_stop(
    demo_root: Path,
    host_worker: Any,
    asgi_server: LiveServer,
    page: Any,
    operator: Any,
    errors: list[str],
) -> None:
    binary = server_binary()
    if binary is None:
        pytest.skip("no llama-server built here: run scripts/llama.sh")
    worker = start_sim_worker(host_worker, HOST, demo_root, SHARDBOARD_LLAMA_SERVER_BIN=str(binary))

    # Picks the GGUF model from the Models page.
    login(page, asgi_server, operator.username)
    page.goto(f"{asgi_server.url}/models/")
    page.click(f"a[href='{GGUF_PAGE}']")
    page.wait_for_url(lambda url: GGUF_PAGE in url, timeout=BROWSER_WAIT_MS)
    assert page.locator("#plan-target-select").input_value() == HOST

    # The what-if pair of unequal cards: the demo fits one (one GPU, no split); a split pinned
    # by hand draws its unequal ratios; no launch there.
    _replanned(page, lambda: page.select_option("#plan-target-select", "whatif"))
    _replanned(page, lambda: page.fill("#plan-gpus", TWO_GPUS))
    assert page.locator("#plan-split").inner_text() == "one GPU, no split"
    _replanned(page, lambda: page.fill("#plan-tensor-split", "2,1"))
    split = page.locator("#plan-split")
    assert split.inner_text().startswith("layer split over 2 GPUs, -ts 2,1")
    ratios = [float(r) for r in (split.get_attribute("data-ratios") or "").split(",")]
    assert ratios == [2.0, 1.0]
    devices = page.locator("#plan-devices tbody tr td:first-child").all_inner_texts()
    assert devices == ["GPU 0 · GPU 24GiB", "GPU 1 · GPU 16GiB", "CPU"]
    assert page.locator("#launch-button").is_disabled()
    assert page.locator("#launch-note").inner_text() == "Pick a registered host to launch."

    # Back on this machine's host (the pinned split cleared): Launch posts the plan's fields.
    _replanned(page, lambda: page.fill("#plan-tensor-split", ""))
    _replanned(page, lambda: page.select_option("#plan-target-select", HOST))
    _replanned(page, lambda: page.fill("#gguf-plan-form input[name=slots]", "2"))
    form = "#launch-form input[type=hidden]"
    assert page.locator(f"{form}[name=engine]").input_value() == "llamacpp"
    assert page.locator(f"{form}[name=model_ref]").input_value() == "local:0/demo/demo-Q8_0.gguf"
    assert page.locator(f"{form}[name=max_num_seqs]").input_value() == "2"
    assert "on this host's CPU" in page.locator("#launch-note").inner_text()
    expect(page.locator("#launch-button")).to_be_enabled(timeout=BROWSER_WAIT_MS)
    page.fill("#launch-form input[name=name]", NAME)
    page.click("#launch-button")
    page.wait_for_url("**/deployments/*/", timeout=BROWSER_WAIT_MS)
    d = Deployment.objects.get(name=NAME)
    assert d.engine == "llamacpp" and d.snapshot.engine_args.n_parallel == 2
    try:
        wait_for(lambda: _status(d) in ("running", "failed"), timeout_s=90, interval_s=0.5)
    except AssertionError:
        print(worker.log()[-5000:])
        raise
    assert d.status == "running", d.failure_reason
    expect(page.locator("#status")).to_have_text("Running", timeout=BROWSER_WAIT_MS)
    spawned = AuditEvent.objects.get(action="deployment.spawn", target_id=str(d.pk))
    assert Path(spawned.detail["argv"][0]) == binary

    # Chats with it in the playground (greedy: the random-weight demo then says one thing), in
    # a tab of its own: the deployment's page reloads itself as its status moves on, which
    # would cut off a navigation away from it.
    chat = page.context.new_page()
    _watch(chat, errors)
    chat.goto(f"{asgi_server.url}/playground/")
    chat.select_option("#deployment", NAME)
    chat.fill(".pg-msg textarea", "1 + 1 =")
    chat.fill("#max-tokens", "6")
    chat.fill("#temperature", "0")
    chat.click("#send")
    pane = chat.locator('.pane[data-slot="a"]')
    expect(pane.locator(".pane-status")).to_have_text("done", timeout=BROWSER_WAIT_MS)
    assert int(pane.locator(".m-completion-server").inner_text()) > 0
    run = wait_for(lambda: PlaygroundRun.objects.filter(deployment_name=NAME).first())
    assert run.user == operator and run.server_timings["completion_tokens"] > 0

    # Then through /v1/ with the OpenAI SDK and an API token.
    from openai import OpenAI

    _, raw = playground_services.token_create(user=operator, name="sdk")
    client = OpenAI(base_url=f"{asgi_server.url}/v1", api_key=raw, max_retries=0, timeout=60)
    answer = client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "1 + 1 ="}], max_tokens=6, temperature=0
    )
    assert answer.choices[0].message.content
    assert answer.usage is not None and answer.usage.completion_tokens > 0
    assert NAME in [m.id for m in client.models.list()]

    # And stops it from its page.
    chat.goto(f"{asgi_server.url}/deployments/{d.pk}/")
    chat.on("dialog", lambda dialog: dialog.accept())
    chat.click("#stop-button")
    wait_for(lambda: _status(d) == "stopped", interval_s=0.2)
    expect(chat.locator("#status")).to_have_text("Stopped", timeout=BROWSER_WAIT_MS)
    assert not GpuLease.objects.filter(deployment=d, active=True).exists()
    assert errors == []


def _status(d: Deployment) -> str:
    d.refresh_from_db()
    return d.status
