"""A small fleet of two teams whose GPU leases span a few days (rows only, no worker): the
`make_fleet` fixture of the teams tests and the API's usage tests."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deployments.models import Deployment, GpuLease
from teams.models import Team
from tests.support.hosts import sim_host
from tests.support.personas import make_user

BASE = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def held(d: Deployment, gpu_index: int, since: datetime, until: datetime | None) -> None:
    """A lease of one GPU from `since` to `until` (None: still held)."""
    lease = GpuLease.objects.create(
        deployment=d, gpu=d.host.gpus.get(index=gpu_index), memory_bytes=1 << 30
    )
    GpuLease.objects.filter(pk=lease.pk).update(
        created_at=since, active=until is None, released_at=until
    )


@pytest.fixture
def make_fleet(operator: Any) -> Callable[[datetime], dict[str, Any]]:
    """Two teams' leases, placed in hours before `now` (BASE: 2026-12-04 12:00 UTC)."""

    def make(now: datetime = BASE) -> dict[str, Any]:
        host = sim_host("usagehost", 4)
        red = Team.objects.create(name="red", max_gpus=4, gpu_hours_per_month=50)
        red.members.add(operator)
        blue = make_user("bea-operator", "operator")
        team_blue = Team.objects.create(name="blue")
        team_blue.members.add(blue)

        def deployment(name: str, user: Any, team: Team | None) -> Deployment:
            return Deployment.objects.create(
                name=name,
                model_id="m",
                engine="vllm",
                host=host,
                created_by=user,
                team=team,
                status="running",
            )

        def ago(h: float) -> datetime:
            return now - timedelta(hours=h)

        chat = deployment("chat", operator, red)
        held(chat, 0, ago(38), ago(34))  # at BASE: 2 h on Dec 2, 2 h on Dec 3
        held(chat, 1, ago(2), None)  # 2 h so far
        held(deployment("old", blue, team_blue), 2, ago(14 * 24 + 12), ago(13 * 24 + 12))
        held(deployment("code", blue, team_blue), 3, ago(0.5), None)
        return {"red": red, "blue": blue, "host": host}

    return make
