"""The Usage page in a real browser: the charts drawn from the rows, the quotas' use, the team
filter, and a bad window answered with a message."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from tests.support.browser import login

pytestmark = pytest.mark.browser


def test_usage_page_charts_and_quotas(asgi_server, page, make_fleet, operator) -> None:
    make_fleet(timezone.now())
    login(page, asgi_server, operator.username)
    page.click("nav.mainnav a[data-nav=usage]")
    page.wait_for_url("**/usage/")
    for chart in ("gpu-team", "gpu-user", "tokens-token", "tokens-deployment"):
        page.wait_for_selector(f"#chart-{chart} .main-svg")
    assert page.get_attribute("#chart-gpu-team", "data-traces") == "2"  # red and blue
    assert page.get_attribute("#chart-gpu-user", "data-traces") == "2"
    assert page.get_attribute("#chart-tokens-token", "data-traces") == "0"  # no /v1/ use yet
    assert "nothing in this window" in page.inner_text("#chart-tokens-token")
    assert page.inner_text("#quota-use tr[data-team=red] td[data-role=gpus]") == "1 of 4"
    assert "(no limit)" in page.inner_text("#quota-use tr[data-team=blue] td[data-role=gpus]")
    page.select_option("#usage-filter select[name=team]", "blue")
    page.click("#usage-filter button[type=submit]")
    page.wait_for_url("**/usage/?team=blue*")
    page.wait_for_selector("#chart-gpu-team .main-svg")
    assert page.get_attribute("#chart-gpu-team", "data-traces") == "1"
    assert page.locator("#quota-use tr[data-team]").count() == 1


def test_a_bad_window_is_answered_with_a_message(asgi_server, page, operator: Any) -> None:
    login(page, asgi_server, operator.username)
    response = page.goto(f"{asgi_server.url}/usage/?days=9999&team=nosuch")
    assert response is not None and response.status == 400
    assert "Days: a whole number from 1 to 92" in page.inner_text("#usage-problem")
