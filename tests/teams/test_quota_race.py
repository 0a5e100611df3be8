"""On PostgreSQL: twenty launches of one team race; the team's GPU quota is never passed."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from deployments import planning
from deployments.models import GpuLease
from teams.models import Team
from tests.support.hosts import sim_host
from tests.support.races import race_launches, tiny_launches

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]
LAUNCHES = 20
QUOTA = 3


@pytest.mark.timeout(240)
def test_twenty_racing_launches_never_pass_the_teams_gpu_quota(model_root: Any, operator) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("row locks and concurrent transactions need PostgreSQL")
    # A GPU of its own for each launch: the launches contend on the team's quota alone.
    sim_host("quotarace", LAUNCHES)
    team = Team.objects.create(name="racers", max_gpus=QUOTA)
    team.members.add(operator)
    one_gpu = planning.PlanRequest(tensor_parallel_size=1)
    requests = tiny_launches("quota", "quotarace", LAUNCHES, one_gpu, gpu_indices=lambda i: (i,))
    outcomes = race_launches(operator, requests)
    assert len(outcomes) == LAUNCHES
    wins = outcomes.count("won")
    held = GpuLease.objects.filter(active=True, deployment__team=team).count()
    assert wins == held == QUOTA
    refused = [o for o in outcomes if o != "won"]
    assert all("Team racers may hold 3 GPUs at once" in o for o in refused), refused
