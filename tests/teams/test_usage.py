"""Usage derived from the lease and audit rows (teams.usage), and the Usage page."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from controlpanel.audit import audit_record
from playground import services as playground_services
from playground.gateway.ratelimit import bearer_id
from playground.tokens import token_hash
from teams import usage

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)  # the fleet's BASE


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_gpu_hours_by_team_and_user_per_day(make_fleet, operator) -> None:
    make_fleet()
    start, end = usage.window(NOW, 7)
    got = usage.gpu_hours(start, end)
    assert got["team"] == {
        "blue": {"2026-12-04": 0.5},
        "red": {"2026-12-02": 2.0, "2026-12-03": 2.0, "2026-12-04": 2.0},
    }
    assert got["user"]["otto-operator"] == got["team"]["red"]
    assert usage.gpu_hours(start, end, team="blue")["team"] == {"blue": {"2026-12-04": 0.5}}


def test_quotas_show_current_use(make_fleet) -> None:
    make_fleet()
    rows = {r.team: r for r in usage.quota_rows(NOW)}
    assert rows["red"].gpus_text == "1 of 4"
    assert rows["red"].hours_text == "6.0 of 50"  # December: 4 h on GPU 0, 2 h on GPU 1
    assert rows["blue"].gpus_text == "1 (no limit)"


def test_gateway_tokens_by_token_and_deployment(make_fleet, operator) -> None:
    make_fleet()
    _token, raw = playground_services.token_create(user=operator, name="ci")
    for when, bearer, name, used in [
        ("2026-12-03 09:00", bearer_id(token_hash(raw)), "chat", (10, 20)),
        ("2026-12-04 09:00", bearer_id(token_hash(raw)), "chat", (5, 5)),
        ("2026-12-04 10:00", None, "code", (1, 2)),
    ]:
        with time_machine.travel(at(when), tick=False):
            audit_record(
                actor=operator,
                action="playground.request",
                target_type="deployment",
                detail={
                    "deployment": name,
                    "usage": {"prompt": used[0], "completion": used[1]},
                    **({"bearer_id": bearer} if bearer else {}),
                },
            )
    start, end = usage.window(NOW, 7)
    got = usage.gateway_tokens(start, end)
    assert got["token"] == {
        "ci (otto-operator)": {"2026-12-03": 30, "2026-12-04": 10},
        "playground (session)": {"2026-12-04": 3},
    }
    assert got["deployment"] == {
        "chat": {"2026-12-03": 30, "2026-12-04": 10},
        "code": {"2026-12-04": 3},
    }
    assert usage.tokens_today_by_user(NOW) == {"otto-operator": 13}
