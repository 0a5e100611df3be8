"""The playground page in a real browser, on a real tiny transformers engine."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from controlpanel.models import AuditEvent
from playground.models import ApiToken, PlaygroundRun
from tests.support.browser import login
from tests.support.waiting import wait_for

pytestmark = pytest.mark.browser


def _open(page: Any, server: Any, user: Any) -> None:
    login(page, server, user.username)
    page.goto(f"{server.url}/playground/")


def _ask(page: Any, text: str) -> Any:
    """Send `text` as the user's message; the first answer pane."""
    page.fill(".pg-msg textarea", text)
    page.click("#send")
    return page.locator('.pane[data-slot="a"]')


def _rate(pane: Any, cell: str) -> float | None:
    """A decode-rate cell's figure; None where the page shows none ("–")."""
    text = pane.locator(f".m-{cell}").inner_text()
    return None if text == "–" else float(text)


def test_tokens_stream_in_with_server_and_browser_timings(
    server: Any, tiny_engine: Any, make_deployment: Any, operator: Any, page: Any
) -> None:
    make_deployment("tiny", tiny_engine.port)
    _open(page, server, operator)
    page.fill(".pg-msg textarea", "hello, how are you today?")
    page.fill("#max-tokens", "48")
    page.fill("#temperature", "1")
    page.fill("#seed", "7")
    page.click("#send")
    pane = page.locator('.pane[data-slot="a"]')
    expect(pane.locator(".pane-status")).to_have_text("done")
    for cell in ("ttft-server", "ttft-browser"):
        assert float(pane.locator(f".m-{cell}").inner_text().removesuffix(" ms")) > 0
    # A rate needs two chunks seen apart: on a loaded machine this engine's whole answer can
    # reach the relay or the browser in one read, and the page then shows "–", not a made-up
    # figure (the rates themselves: the test below, on tokens the stub spaces out).
    for cell in ("tps-server", "tps-browser"):
        rate = _rate(pane, cell)
        assert rate is None or rate > 0, (cell, rate)
    generated = int(pane.locator(".m-completion-server").inner_text())
    assert 2 <= generated <= 48
    assert int(pane.locator(".m-completion-browser").inner_text()) == generated
    answer = pane.locator(".pg-answer").text_content()
    assert len(answer) >= generated, "every streamed token landed in the answer"
    assert int(pane.locator(".m-prompt-server").inner_text()) > 0
    run = wait_for(
        lambda: PlaygroundRun.objects.filter(
            user=operator, browser_timings__has_key="ttft_ms"
        ).first()
    )
    assert (
        run.answer == answer
        and run.deployment_name == "tiny"
        and run.server_timings["completion_tokens"] == generated
    )
    assert (
        run.parameters["seed"] == 7 and run.messages[-1]["content"] == "hello, how are you today?"
    )
    expect(page.locator("#history tbody tr")).to_have_count(1)
    # multi-turn: the answer became an assistant message, and a new user message waits
    expect(page.locator(".pg-msg")).to_have_count(3)


def test_decode_rates_from_the_server_and_the_browser(
    server: Any, stub: Any, make_deployment: Any, operator: Any, page: Any
) -> None:
    stub.tokens, stub.interval_s = 20, 0.05  # about a second of decoding, a token at a time
    make_deployment("spaced", stub.port)
    _open(page, server, operator)
    pane = _ask(page, "count to twenty")
    expect(pane.locator(".pane-status")).to_have_text("done")
    for side in ("server", "browser"):
        rate = _rate(pane, f"tps-{side}")
        assert rate is not None and 0 < rate < 1000, (side, rate)
        assert pane.locator(f".m-completion-{side}").inner_text() == "20"


def test_stop_aborts_and_the_server_closes_the_engine_request(
    server: Any, stub: Any, make_deployment: Any, operator: Any, page: Any
) -> None:
    stub.hold_after_first = threading.Event()  # the engine would never finish on its own
    make_deployment("slow", stub.port)
    _open(page, server, operator)
    pane = _ask(page, "tell me a long story")
    expect(pane.locator(".pg-answer")).to_have_text("t0 ")
    expect(pane.locator(".pane-status")).to_have_text("streaming")
    page.click("#stop")
    expect(pane.locator(".pane-status")).to_have_text("stopped")
    assert pane.locator(".m-ttft-browser").inner_text().endswith(" ms")
    wait_for(stub.disconnected.is_set)
    assert not stub.finished.is_set()
    row = wait_for(lambda: AuditEvent.objects.filter(action="playground.request").first())
    assert row.detail["status"] == "client_disconnected"
    expect(page.locator("#send")).to_be_enabled()


def test_compare_streams_two_deployments_side_by_side(
    server: Any, tiny_engine: Any, stub: Any, make_deployment: Any, operator: Any, page: Any
) -> None:
    make_deployment("tiny", tiny_engine.port)
    make_deployment("stub", stub.port)
    _open(page, server, operator)
    page.check("#compare")
    page.select_option("#deployment", "tiny")
    page.select_option("#deployment-b", "stub")
    page.click("input[name=mode][value=completion]")
    page.fill("#prompt", "1 + 1 =")
    page.fill("#max-tokens", "5")
    page.click("#send")
    for slot, title in (("a", "tiny"), ("b", "stub")):
        pane = page.locator(f'.pane[data-slot="{slot}"]')
        expect(pane.locator(".pane-title")).to_have_text(title)
        expect(pane.locator(".pane-status")).to_have_text("done")
    expect(page.locator('.pane[data-slot="b"] .pg-answer')).to_have_text("t0 t1 t2 t3 t4 ")
    assert stub.seen[0].body["prompt"] == "1 + 1 =" and stub.seen[0].body["max_tokens"] == 5


def test_engine_down_shows_an_error_not_a_spinner(
    server: Any, make_deployment: Any, operator: Any, page: Any
) -> None:
    make_deployment("down", 9)  # nothing listens on the discard port
    _open(page, server, operator)
    pane = _ask(page, "hello")
    expect(pane.locator(".pane-status")).to_have_text("error")
    expect(pane.locator(".pane-error")).to_contain_text("not reachable")


def test_token_is_shown_once_and_view_code_uses_it(
    server: Any, stub: Any, make_deployment: Any, operator: Any, page: Any
) -> None:
    make_deployment("tiny", stub.port)
    _open(page, server, operator)
    page.click("#view-code")
    expect(page.locator("#code-curl")).to_contain_text("$SHARDBOARD_TOKEN")
    expect(page.locator("#code-curl")).to_contain_text(f"{server.url}/v1/chat/completions")
    page.click("#token-create")
    expect(page.locator("#new-token")).to_contain_text("sb-")
    raw = page.locator("#new-token").inner_text().rsplit(" ", 1)[1]
    expect(page.locator("#code-python")).to_contain_text(f'api_key="{raw}"')
    token = ApiToken.objects.get(user=operator)
    assert token.token_hash != raw and raw.startswith(token.prefix)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {raw}"}
    assert (
        httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=headers).status_code
        == 200
    )
    page.reload()
    assert raw not in page.content(), "the token is never shown again"
    page.click("#token-list .revoke")
    expect(page.locator("#token-list .revoke")).to_have_count(0)
    assert (
        httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=headers).status_code
        == 401
    )


def test_nothing_running_says_so_and_links_to_deployments(
    server: Any, make_deployment: Any, operator: Any, page: Any
) -> None:
    make_deployment("old", 9, status="stopped")
    _open(page, server, operator)
    expect(page.locator("#nothing-running")).to_contain_text("No deployment is running")
    expect(page.locator("#nothing-running a")).to_have_attribute("href", "/deployments/")


def test_viewers_may_not_open_the_playground(server: Any, viewer: Any, page: Any) -> None:
    _open(page, server, viewer)
    assert page.locator("h1").inner_text() != "Playground"
    response = page.request.get(f"{server.url}/playground/")
    assert response.status == 403
