"""Teams on the pages: chosen in the launch form, refusals shown there, filters on the list and
the dashboard, and the team's refusal on another team's Stop."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from deployments.models import Deployment
from teams.models import Team
from tests.support.hosts import sim_host
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db
HOST = "pagehost"
FORM = {
    "model_ref": "local:0/tiny",
    "host": HOST,
    "engine": "transformers",
    "dtype": "auto",
    "kv_cache_dtype": "auto",
    "tensor_parallel_size": "1",
}


@pytest.fixture
def teams(model_root: Any, operator: Any) -> dict[str, Team]:
    sim_host(HOST, 2)
    red, blue = Team.objects.create(name="red", max_gpus=1), Team.objects.create(name="blue")
    red.members.add(operator)
    blue.members.add(operator)
    return {"red": red, "blue": blue}


def test_the_launch_form_offers_the_users_teams(client: Client, operator, teams) -> None:
    Team.objects.create(name="green")  # not the operator's: not offered
    client.force_login(operator)
    page = client.get("/deployments/new/").content.decode()
    assert '<option value="red">red</option>' in page and "green" not in page
    response = client.post("/deployments/new/", {**FORM, "name": "chat"})
    assert "You are in several teams (blue, red)" in response.content.decode()
    response = client.post("/deployments/new/", {**FORM, "name": "chat", "team": "red"})
    assert response.status_code == 302
    assert Deployment.objects.get(name="chat").team == teams["red"]
    response = client.post("/deployments/new/", {**FORM, "name": "more", "team": "red"})
    assert "Team red may hold 1 GPUs at once (its quota); it holds 1 now" in (
        response.content.decode()
    )
    assert not Deployment.objects.filter(name="more").exists()


def test_list_and_dashboard_filter_by_team(client: Client, operator, teams) -> None:
    client.force_login(operator)
    for name, team in (("chat", "red"), ("code", "blue")):
        client.post("/deployments/new/", {**FORM, "name": name, "team": team})
    listed = client.get("/deployments/?team=blue").content.decode()
    assert "code" in listed and ">chat<" not in listed
    assert 'data-team="blue"' in listed
    dashboard = client.get("/?team=red").content.decode()
    assert ">chat<" in dashboard and ">code<" not in dashboard


def test_stop_of_another_teams_deployment_says_it_needs_admin(
    client: Client, operator, teams
) -> None:
    client.force_login(operator)
    client.post("/deployments/new/", {**FORM, "name": "chat", "team": "red"})
    d = Deployment.objects.get(name="chat")
    stranger = make_user("sam-operator", "operator")
    client.force_login(stranger)
    page = client.post(f"/deployments/{d.pk}/stop/", follow=True).content.decode()
    assert "chat belongs to team red, which you are not in; stopping another team&#x27;s" in page
    d.refresh_from_db()
    assert d.status == "pending"


def test_admins_manage_teams_and_members_in_the_admin(client: Client, operator) -> None:
    admin = make_user("root-admin", None)
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    response = client.post(
        "/admin/teams/team/add/",
        {"name": "green", "members": [operator.pk], "max_gpus": "2", "gpu_hours_per_month": ""},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    team = Team.objects.get(name="green")
    assert team.max_gpus == 2 and team.gpu_hours_per_month is None
    assert list(team.members.all()) == [operator]
    assert "green" in client.get("/admin/teams/team/").content.decode()
