"""Teams at launch, stop and scale, and their quotas, through the real launch service."""

from __future__ import annotations

from typing import Any

import pytest
import time_machine
from django.utils import timezone

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.lifecycle.scaling import deployment_scale
from deployments.lifecycle.services import (
    DeploymentError,
    LaunchRequest,
    deployment_create,
    deployment_stop,
)
from deployments.models import Deployment, GpuLease, Status
from teams.host.enforcement import enforce_monthly
from teams.models import Team
from tests.support.hosts import sim_host
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db
HOST = "teamhost"


@pytest.fixture
def host(model_root: Any) -> Any:
    return sim_host(HOST, 4)


@pytest.fixture
def red(operator: Any) -> Team:
    team = Team.objects.create(name="red")
    team.members.add(operator)
    return team


def launch(user: Any, name: str, *, team: str | None = None, replicas: int = 1) -> Deployment:
    request = LaunchRequest(
        name=name,
        model_ref="local:0/tiny",
        host_name=HOST,
        plan_request=planning.PlanRequest(tensor_parallel_size=1),
        replicas=replicas,
        team=team,
    )
    return deployment_create(user=user, request=request)


def test_a_launch_belongs_to_the_users_only_team(host, red, operator) -> None:
    d = launch(operator, "chat", replicas=2)
    assert {r.team_id for r in d.group()} == {red.pk}


def test_a_user_in_several_teams_must_choose(host, red, operator) -> None:
    Team.objects.create(name="blue").members.add(operator)
    with pytest.raises(DeploymentError, match=r"several teams \(blue, red\)"):
        launch(operator, "chat")
    assert launch(operator, "chat", team="blue").team.name == "blue"


def test_launching_for_a_team_one_is_not_in_needs_admin(host, red, operator, admin_user) -> None:
    Team.objects.create(name="blue")
    with pytest.raises(DeploymentError, match=r"not in team blue.*Admin role"):
        launch(operator, "chat", team="blue")
    with pytest.raises(DeploymentError, match="Unknown team 'green'"):
        launch(operator, "chat", team="green")
    assert launch(admin_user, "chat", team="blue").team.name == "blue"


def test_gpu_quota_refuses_before_anything_is_leased(host, red, operator) -> None:
    red.max_gpus = 2
    red.save()
    launch(operator, "one")
    launch(operator, "two")
    with pytest.raises(DeploymentError) as refused:
        launch(operator, "three")
    message = str(refused.value)
    assert "Team red may hold 2 GPUs at once" in message
    assert "it holds 2 now and this needs 1 more" in message
    assert not Deployment.objects.filter(name="three").exists()
    assert GpuLease.objects.filter(active=True).count() == 2


def test_gpu_quota_counts_every_replica(host, red, operator) -> None:
    red.max_gpus = 3
    red.save()
    launch(operator, "one", replicas=2)
    with pytest.raises(DeploymentError, match="holds 2 now and this needs 2 more"):
        launch(operator, "two", replicas=2)
    first = Deployment.objects.get(name="one", replica_index=1)
    with pytest.raises(DeploymentError, match="may hold 3 GPUs at once"):
        deployment_scale(user=operator, deployment=first, replicas=4)
    assert deployment_scale(user=operator, deployment=first, replicas=3).pk == first.pk


def test_monthly_gpu_hours_refuse_a_launch_once_used_up(host, red, operator) -> None:
    red.gpu_hours_per_month = 2.5
    red.save()
    with time_machine.travel("2026-11-30 23:00:00+00:00", tick=False):
        launch(operator, "late")  # its November hour does not count in December
    with time_machine.travel("2026-12-01 02:00:00+00:00", tick=False):
        launch(operator, "early")  # "late" has held its GPU 2 h of December: under 2.5
    with (
        time_machine.travel("2026-12-01 02:30:00+00:00", tick=False),
        pytest.raises(DeploymentError) as refused,
    ):
        launch(operator, "third")  # 2.5 h + 0.5 h
    assert "Team red has used 3.0 of its 2.5 GPU-hours for December 2026" in str(refused.value)
    assert not Deployment.objects.filter(name="third").exists()


def test_stopping_another_teams_deployment_needs_admin(host, red, operator, admin_user) -> None:
    d = launch(operator, "chat")
    stranger = make_user("sam-operator", "operator")
    Team.objects.create(name="blue").members.add(stranger)
    with pytest.raises(DeploymentError, match=r"belongs to team red.*stopping another team's"):
        deployment_stop(user=stranger, deployment=d)
    with pytest.raises(DeploymentError, match="scaling another team's deployment needs the Admin"):
        deployment_scale(user=stranger, deployment=d, replicas=2)
    deployment_stop(user=admin_user, deployment=d)
    d.refresh_from_db()
    assert d.status == Status.STOPPING


def test_a_user_in_no_team_launches_without_quota(host, operator) -> None:
    assert launch(operator, "chat").team is None


def test_a_running_deployment_past_the_monthly_limit_is_flagged_once(host, red, operator) -> None:
    red.gpu_hours_per_month = 1
    red.save()
    with time_machine.travel("2026-12-01 08:00:00+00:00", tick=False):
        d = launch(operator, "chat", replicas=2)
    with time_machine.travel("2026-12-01 08:20:00+00:00", tick=False):
        assert enforce_monthly(timezone.now()) == {"flagged": [], "stopped": []}  # 0.67 h
    with time_machine.travel("2026-12-01 08:40:00+00:00", tick=False):
        assert enforce_monthly(timezone.now()) == {"flagged": [d.pk], "stopped": []}
        assert enforce_monthly(timezone.now()) == {"flagged": [], "stopped": []}  # once
    d.refresh_from_db()
    assert d.over_quota_at is not None and d.status == Status.PENDING
    row = AuditEvent.objects.get(action="team.quota_exceeded")
    assert "team red used 1.3 of its 1 GPU-hours for December 2026" in row.detail["why"]
    red.gpu_hours_per_month = 10  # an admin raised it: the flag goes
    red.save()
    with time_machine.travel("2026-12-01 08:45:00+00:00", tick=False):
        enforce_monthly(timezone.now())
    d.refresh_from_db()
    assert d.over_quota_at is None


def test_a_team_that_says_so_has_its_deployments_stopped(host, red, operator) -> None:
    red.gpu_hours_per_month = 1
    red.stop_over_monthly = True
    red.save()
    with time_machine.travel("2026-12-01 08:00:00+00:00", tick=False):
        d = launch(operator, "chat", replicas=2)
    with time_machine.travel("2026-12-01 09:00:00+00:00", tick=False):
        assert enforce_monthly(timezone.now()) == {"flagged": [d.pk], "stopped": [d.pk]}
    assert {r.status for r in d.group()} == {Status.STOPPING}
    stop = AuditEvent.objects.get(action="deployment.stop")
    assert stop.actor is None
    assert stop.detail["reason"].startswith("stopped by quota: team red used 2.0 of its 1")
    with time_machine.travel("2026-12-01 09:01:00+00:00", tick=False):
        assert enforce_monthly(timezone.now()) == {"flagged": [], "stopped": []}
