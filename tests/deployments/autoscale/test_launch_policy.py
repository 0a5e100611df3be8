"""A scaling policy set on the launch form: its checks against the launch, the row and its audit
rows written with the deployment, shown on the page at once, kept by a relaunch. The launches
here never reach a worker: the `db` fixture's transaction is rolled back before any on-commit
task is sent."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from controlpanel.models import AuditEvent
from deployments.lifecycle import policy, scaling
from deployments.lifecycle.forms import LaunchForm
from deployments.lifecycle.relaunch import deployment_relaunch
from deployments.lifecycle.services import DeploymentError, LaunchRequest, deployment_create
from deployments.models import Deployment, ScalingPolicy, Status
from monitoring.models import Host
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db
HOST = "launchpolicy"
LAUNCH = {
    "name": "elastic",
    "model_ref": "local:0/tiny",
    "host": HOST,
    "engine": "transformers",
    "dtype": "auto",
    "kv_cache_dtype": "auto",
}


@pytest.fixture
def host(db: None) -> Host:
    return sim_host(HOST, 4)


def form(**fields: Any) -> LaunchForm:
    return LaunchForm({**LAUNCH, **{k: str(v) for k, v in fields.items()}})


def test_blank_autoscaling_fields_launch_without_a_policy(host: Host) -> None:
    launch = form(replicas=2)
    assert launch.is_valid(), launch.errors
    assert launch.launch_request().scaling_policy is None


def test_a_policy_starts_from_the_launched_replicas_with_the_default_windows(host: Host) -> None:
    launch = form(replicas=2, max_replicas=5, ttft_p90_s=1.5)
    assert launch.is_valid(), launch.errors
    assert launch.launch_request().scaling_policy == policy.PolicySettings(
        min_replicas=2, max_replicas=5, ttft_p90_s=1.5, up_after_s=15.0, down_after_s=60.0
    )
    given = form(max_replicas=3, min_replicas=0, kv_usage=0.8, up_after_s=30)
    assert given.is_valid(), given.errors
    chosen = given.launch_request().scaling_policy
    assert chosen and (chosen.min_replicas, chosen.kv_usage, chosen.up_after_s) == (0, 0.8, 30)


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"ttft_p90_s": 2}, "max_replicas", "Autoscaling needs max replicas"),
        ({"replicas": 3, "max_replicas": 2, "kv_usage": 0.9}, "max_replicas",
         "Max replicas (2) is below the 3 launched."),
        ({"replicas": "max", "max_replicas": 4, "ttft_p90_s": 2}, "replicas", "not max"),
        ({"max_replicas": 4}, "__all__", "Autoscaling: Give a target"),
        ({"max_replicas": 2, "min_replicas": 3, "ttft_p90_s": 2}, "__all__",
         "Autoscaling: Replicas: 0 ≤ min ≤ max"),
        ({"max_replicas": 2, "kv_usage": 2}, "kv_usage", "less than or equal to 1"),
        ({"max_replicas": 17, "kv_usage": 0.5}, "max_replicas", "less than or equal to 16"),
    ],
)  # fmt: skip
def test_the_form_refuses_a_policy_the_launch_cannot_carry(
    host: Host, fields: dict[str, Any], field: str, words: str
) -> None:
    launch = form(**fields)
    assert not launch.is_valid()
    assert list(launch.errors) == [field], launch.errors
    assert words in launch.errors[field][0]


def test_the_form_refuses_a_policy_over_further_hosts(host: Host) -> None:
    sim_host("second", 4)
    launch = LaunchForm({**LAUNCH, "hosts": ["second"], "max_replicas": "2", "ttft_p90_s": "2"})
    assert not launch.is_valid()
    assert launch.errors["hosts"] == [
        "A replica spanning further hosts is never scaled: launch on one host to autoscale."
    ]
    assert LaunchForm({**LAUNCH, "hosts": ["second"]}).is_valid()  # without a policy it may


def test_the_service_refuses_a_policy_a_launch_of_max_replicas_cannot_carry(
    model_root: Any, host: Host, operator: Any
) -> None:
    wanted = policy.PolicySettings(min_replicas=1, max_replicas=4, ttft_p90_s=2)
    request = LaunchRequest(
        name="elastic", model_ref="local:0/tiny", host_name=HOST, replicas=None,
        scaling_policy=wanted,
    )  # fmt: skip
    with pytest.raises(DeploymentError, match="not max"):
        deployment_create(user=operator, request=request)
    assert not Deployment.objects.exists() and not ScalingPolicy.objects.exists()


def test_the_launch_page_creates_the_policy_with_its_audit_rows(
    model_root: Any, host: Host, operator: Any
) -> None:
    client = Client()
    client.force_login(operator)
    page = client.get("/deployments/new/").content.decode()
    assert '<details id="launch-autoscale">' in page  # closed until something is in it
    posted = {**LAUNCH, "max_replicas": "3", "ttft_p90_s": "2", "down_after_s": "90"}
    response = client.post("/deployments/new/", posted, follow=True)
    assert response.status_code == 200
    d = Deployment.objects.get(name="elastic")
    kept = ScalingPolicy.objects.get(deployment=d)
    assert (kept.min_replicas, kept.max_replicas, kept.ttft_p90_s) == (1, 3, 2.0)
    assert (kept.down_after_s, kept.set_by, kept.enabled) == (90.0, operator, True)
    created = AuditEvent.objects.get(action="deployment.create", target_id=str(d.pk))
    assert created.detail["scaling_policy"] is True
    set_row = AuditEvent.objects.get(action="deployment.autoscale_policy", target_id=str(d.pk))
    assert set_row.actor == operator and set_row.id > created.id
    assert set_row.detail["at_launch"] and set_row.detail["max_replicas"] == 3
    section = client.get(f"/deployments/{d.pk}/autoscale/").content.decode()
    assert "Policy: 1 to 3 replicas · p90 TTFT ≤ 2.0 s" in section
    assert f"set by {operator.username}" in section


def test_a_launch_without_a_policy_says_so_in_its_audit_row(
    model_root: Any, host: Host, operator: Any
) -> None:
    client = Client()
    client.force_login(operator)
    client.post("/deployments/new/", LAUNCH)
    d = Deployment.objects.get(name="elastic")
    created = AuditEvent.objects.get(action="deployment.create", target_id=str(d.pk))
    assert created.detail["scaling_policy"] is False
    assert not ScalingPolicy.objects.exists()


def test_a_refused_policy_reopens_its_section_with_the_message(
    model_root: Any, host: Host, operator: Any
) -> None:
    client = Client()
    client.force_login(operator)
    html = client.post("/deployments/new/", {**LAUNCH, "replicas": "2", "max_replicas": "1",
                                              "waiting_per_replica": "4"}).content.decode()  # fmt: skip
    section = re.search(r'<details id="launch-autoscale" open>.*?</details>', html, re.S)
    assert section and "Max replicas (1) is below the 2 launched." in section[0]
    assert not Deployment.objects.exists()


def test_a_relaunch_keeps_the_policy_set_at_launch(
    model_root: Any, host: Host, operator: Any
) -> None:
    launch = form(replicas=2, max_replicas=4, waiting_per_replica=3)
    assert launch.is_valid(), launch.errors
    d = deployment_create(user=operator, request=launch.launch_request())
    for row in d.group():
        assert row.transition(Status.STOPPING) and row.transition(Status.STOPPED)
        row.leases.update(active=False)
    again = deployment_relaunch(user=operator, deployment=d)
    kept = ScalingPolicy.objects.get(deployment=again)
    assert (kept.min_replicas, kept.max_replicas, kept.waiting_per_replica) == (2, 4, 3.0)
    row = AuditEvent.objects.get(action="deployment.autoscale_policy", target_id=str(again.pk))
    assert row.detail["kept_from"] == d.pk


def test_the_policys_replica_ceiling_is_the_scale_buttons() -> None:
    assert policy.MAX_REPLICAS == scaling.MAX_REPLICAS
