"""Usage through the API on a real server: the Usage page's own figures (teams.usage.summary),
filtered by team and windowed by days, for the roles the Usage page allows; bad input is JSON
naming the field."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.utils import timezone

from playground import services
from playground.models import Scope
from teams import usage

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def bearer(user: Any, scopes: list[str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {services.token_create(user=user, name='u', scopes=scopes)[1]}"}  # fmt: skip


def total(series: dict[str, float]) -> float:
    return sum(series.values())


def test_usage_is_the_usage_pages_summary_by_team_and_window(
    asgi_server: Any, make_fleet: Any, operator: Any
) -> None:
    make_fleet(timezone.now())
    url, headers = f"{asgi_server.url}/api/v1/usage", bearer(operator, [Scope.READ])
    week = httpx.get(url, params={"days": 7}, headers=headers, timeout=30)
    assert week.status_code == 200, week.text
    body = week.json()
    expected = usage.summary(now=timezone.now(), days=7)
    assert set(body) == set(expected) and body["days"] == expected["days"]
    teams = body["gpu_hours"]["team"]
    assert set(teams) == {"red", "blue"}
    assert total(teams["red"]) == pytest.approx(6.0, abs=0.05)  # 4 h released, 2 h held so far
    assert total(teams["blue"]) == pytest.approx(0.5, abs=0.05)  # the old one is 13 days back
    quotas = {q["team"]: q for q in body["quotas"]}
    assert quotas["red"]["max_gpus"] == 4 and quotas["red"]["gpus_held"] == 1
    assert quotas["red"]["gpu_hours_per_month"] == 50
    month = httpx.get(url, params={"days": 30}, headers=headers, timeout=30).json()
    assert total(month["gpu_hours"]["team"]["blue"]) == pytest.approx(24.5, abs=0.05)
    assert len(month["days"]) == 30
    red = httpx.get(url, params={"team": "red"}, headers=headers, timeout=30).json()
    assert set(red["gpu_hours"]["team"]) == {"red"}
    assert [q["team"] for q in red["quotas"]] == ["red"]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"days": 0}, "query.days"),
        ({"days": 93}, "query.days"),
        ({"days": "week"}, "query.days"),
        ({"team": "nobody"}, "query.team: there is no team 'nobody'"),
        ({"team": "x" * 64}, "query.team"),
    ],
)
def test_bad_usage_queries_name_the_field(
    asgi_server: Any, make_fleet: Any, operator: Any, query: dict[str, Any], named: str
) -> None:
    make_fleet(timezone.now())
    r = httpx.get(
        f"{asgi_server.url}/api/v1/usage", params=query, headers=bearer(operator, [Scope.READ]), timeout=30
    )  # fmt: skip
    assert r.status_code == 422 and named in r.json()["message"], r.text


def test_usage_needs_the_operator_role_as_the_page_does(
    asgi_server: Any, viewer: Any, operator: Any
) -> None:
    url = f"{asgi_server.url}/api/v1/usage"
    refused = httpx.get(url, headers=bearer(viewer, [Scope.READ]), timeout=30)
    assert refused.status_code == 403 and "Operator role" in refused.json()["message"]
    wrong_scope = httpx.get(url, headers=bearer(operator, [Scope.INFER]), timeout=30)
    assert wrong_scope.status_code == 403 and "'read' scope" in wrong_scope.json()["message"]
    assert httpx.get(url, headers=bearer(operator, [Scope.READ]), timeout=30).status_code == 200
