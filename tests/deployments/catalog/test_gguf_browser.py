"""In a real browser: the demo model as a local GGUF, planned on llama.cpp; picking the what-if
target of two unequal cards redraws a two-GPU layer split with unequal -ts ratios."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deployments.catalog.gguf_write import convert_demo
from tests.support.browser import login
from tests.support.live_server import LiveServer
from tests.support.waiting import BROWSER_WAIT_MS, wait_for

pytestmark = pytest.mark.browser
TWO_GPUS = "1x24GiB@pcie,1x16GiB@pcie"
REVISION = "() => Number(document.getElementById('plan-result').dataset.revision || 0)"


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
    page.on("pageerror", lambda exc: seen.append(f"pageerror: {exc}"))
    page.on("console", lambda m: seen.append(f"console: {m.text}") if m.type == "error" else None)
    yield seen


def test_a_local_gguf_on_two_unequal_cards(
    demo_root: Path, asgi_server: LiveServer, page: Any, operator: Any, errors: list[str]
) -> None:
    login(page, asgi_server, operator.username)
    page.goto(f"{asgi_server.url}/models/")
    page.click("a[href='/models/gguf/local/0/demo/demo-Q8_0.gguf/']")
    page.wait_for_url(lambda url: "/models/gguf/local/0/demo/" in url, timeout=BROWSER_WAIT_MS)
    assert page.locator("#plan-split").inner_text() == "one GPU, no split"
    assert page.locator("#launch-button").is_disabled()
    assert page.locator("#launch-note").inner_text() == "Pick a registered host to launch."

    before = page.evaluate(REVISION)
    page.select_option("#plan-target-select", "whatif")
    page.fill("#plan-gpus", TWO_GPUS)
    wait_for(lambda: page.evaluate(REVISION) > before)
    # the demo fits one card with its context: one GPU, as an operator would choose (issue 38)
    assert page.locator("#plan-split").inner_text() == "one GPU, no split"
    assert "one GPU holds the model" in page.locator("#plan-note").inner_text()

    before = page.evaluate(REVISION)
    page.fill("#plan-tensor-split", "2,1")  # a split pinned by hand is drawn as asked
    wait_for(lambda: page.evaluate(REVISION) > before)
    split = page.locator("#plan-split")
    assert split.inner_text().startswith("layer split over 2 GPUs, -ts 2,1 (pinned by you)")
    ratios = [float(r) for r in (split.get_attribute("data-ratios") or "").split(",")]
    assert ratios == [2.0, 1.0]
    assert page.locator("#plan-target").inner_text() == f"what-if {TWO_GPUS}"
    devices = page.locator("#plan-devices tbody tr td:first-child").all_inner_texts()
    assert devices == ["GPU 0 · GPU 24GiB", "GPU 1 · GPU 16GiB", "CPU"]
    flags = page.locator("#plan-flags").inner_text()
    assert f"-ts {','.join(f'{r:g}' for r in ratios)}" in flags and "--fit off" in flags
    command = page.locator("#cmd-llamacpp").inner_text()
    assert f"-ts {','.join(f'{r:g}' for r in ratios)}" in command
    bars = page.evaluate("() => document.getElementById('plan-chart').data[0].y.length")
    assert bars == 2
    assert errors == []
