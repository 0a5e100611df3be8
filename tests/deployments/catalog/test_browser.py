"""A real browser: search as one types, open a model, change the context, see the plan move."""

from __future__ import annotations

from typing import Any

from tests.support.browser import login
from tests.support.catalog import BIG
from tests.support.live_server import LiveServer

WEIGHTS = "document.getElementById('plan-chart').data[0].y"
KV = "Number(document.getElementById('kv-tokens').dataset.value)"


def test_search_open_and_replan(page: Any, live: LiveServer, operator: Any) -> None:
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    login(page, live, operator.username)
    page.goto(f"{live.url}/models/")
    page.wait_for_selector(".model-card")
    page.fill("#q", "llama-3.3")
    page.wait_for_function("() => document.querySelectorAll('#results .model-card').length === 1")
    assert "q=llama-3.3" in page.url  # the address follows the search
    page.click(f"#results a[href='/models/{BIG}/']")
    page.wait_for_url(f"**/models/{BIG}/")
    page.wait_for_function("() => document.getElementById('plan-chart').data !== undefined")
    weights_before = page.evaluate(WEIGHTS)
    kv_before = page.evaluate(KV)
    # 70B fp8 at its full 131,072 tokens: TP 4 (TP 1 would have to clip the context).
    assert len(weights_before) == 4 and 15 < weights_before[0] < 20
    assert page.locator("#plan-layout").inner_text().startswith("TP 4 × PP 1")
    assert page.locator(".modebar-btn[data-title*='Share']").count() == 0

    page.fill("input[name=max_model_len]", "32768")
    page.wait_for_function(f"() => {KV} !== {kv_before}")
    weights_after = page.evaluate(WEIGHTS)
    assert len(weights_after) == 2 and weights_after[0] > weights_before[0] * 1.8
    assert page.evaluate(KV) != kv_before
    layout = page.locator("#plan-layout").inner_text()
    assert "--max-model-len 32768" in page.locator("#cmd-vllm").inner_text()
    assert page.locator("#plan-error").is_hidden()
    tp, pp = (
        int(page.locator(f"#launch-form input[name={n}_parallel_size]").get_attribute("value"))
        for n in ("tensor", "pipeline")
    )
    assert tp * pp == 2 and layout.startswith(f"TP {tp} × PP {pp}")  # Launch follows the plan

    page.fill("input[name=tensor_parallel_size]", "3")
    page.wait_for_selector("#plan-error:not([hidden])")
    assert "divisible by tensor parallel size (3)" in page.locator("#plan-error").inner_text()
    assert page.locator("#launch-button").is_disabled()
    assert all(url.startswith(live.url) for url in requested), requested
