"""Loading and unloading adapters: every refusal says why and changes nothing; a load writes the
adapter, one row per replica and the audit row, and asks each running replica's host worker;
an unload takes it out of the gateway at once; a relaunch keeps them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controlpanel.models import AuditEvent
from deployments.handoff.snapshot import from_plan
from deployments.lifecycle import adapters
from deployments.lifecycle.errors import DeploymentError
from deployments.models import AdapterReplica, AdapterStatus, Deployment, DeploymentAdapter
from monitoring.models import Host
from tests.deployments.lora.test_lora_launch import lora_plan
from tests.support.lora import DEMO_BASE
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db


def deployment(
    operator: Any, root: Path, *, replicas: int = 2, lora: bool = True, name: str = "demo"
) -> Deployment:
    host, _ = Host.objects.get_or_create(name="lora-host", defaults={"queue": "host.lora-host"})
    snapshot = from_plan(lora_plan(), model_ref=f"local:0/{DEMO_BASE}")
    plan = snapshot.to_json()
    if not lora:
        plan["engine_args"]["enable_lora"] = False
    first = None
    for index in range(1, replicas + 1):
        row = Deployment.objects.create(
            name=name,
            model_id=str(root / DEMO_BASE),
            engine="vllm",
            host=host,
            plan=plan,
            status="running",
            port=9000 + index,
            created_by=operator,
            replica_of=first,
            replica_index=index,
        )
        first = first or row
    assert first is not None
    return first


def load(operator: Any, d: Deployment, name: str = "good", source: str = "local:0/adapters/good"):
    return adapters.adapter_load(user=operator, deployment=d, name=name, source=source)


def test_a_load_writes_the_adapter_its_replicas_and_the_audit_row(
    operator: Any, root: Path, django_capture_on_commit_callbacks: Any
) -> None:
    d = deployment(operator, root)
    with django_capture_on_commit_callbacks() as sent:
        adapter = load(operator, d)
    assert (adapter.status, adapter.rank, adapter.base_model) == ("loading", 8, DEMO_BASE)
    assert adapter.target_modules == ["q_proj", "v_proj"]
    placements = AdapterReplica.objects.filter(adapter=adapter)
    assert sorted(p.replica.replica_index for p in placements) == [1, 2]
    assert len(sent) == 2  # one load task per running replica, after commit
    row = AuditEvent.objects.get(action="deployment.adapter_load")
    assert row.actor_name == operator.username
    assert row.detail["adapter"] == "good" and row.detail["source"] == "local:0/adapters/good"
    assert row.detail["hosts"] == ["lora-host"] and len(row.detail["replica_ids"]) == 2


def test_unloading_takes_it_out_at_once_and_is_audited(operator: Any, root: Path) -> None:
    d = deployment(operator, root)
    load(operator, d)
    adapter = adapters.adapter_unload(user=operator, deployment=d, name="good")
    assert adapter.status == AdapterStatus.UNLOADING
    assert AuditEvent.objects.filter(action="deployment.adapter_unload").count() == 1
    with pytest.raises(DeploymentError, match="has no adapter named 'good'"):
        adapters.adapter_unload(user=operator, deployment=d, name="good")


def test_the_name_is_free_again_once_its_deployment_ended(operator: Any, root: Path) -> None:
    old = deployment(operator, root, replicas=1, name="old")
    load(operator, old)
    Deployment.objects.filter(pk=old.pk).update(status="stopped")
    new = deployment(operator, root, replicas=1, name="new")
    adapter = load(operator, new)
    assert adapter.deployment_id == new.pk
    assert DeploymentAdapter.objects.get(deployment=old).status == AdapterStatus.UNLOADED


def test_a_relaunch_keeps_the_adapters(operator: Any, root: Path) -> None:
    old = deployment(operator, root, replicas=2, name="old")
    load(operator, old)
    new = deployment(operator, root, replicas=2, name="new")
    assert adapters.keep_adapters(old, new, user=operator) == ["good"]
    moved = DeploymentAdapter.objects.get(deployment=new)
    assert moved.status == AdapterStatus.LOADING and moved.placements.count() == 2
    assert DeploymentAdapter.objects.get(deployment=old).status == AdapterStatus.UNLOADED


REFUSALS = [
    ({"source": "local:0/adapters/wide"}, "q_proj: the adapter's lora_B is 256 × 8"),
    (
        {"source": "local:0/adapters/rank16"},
        "its rank 16 is over this deployment's max_lora_rank 8",
    ),
    ({"source": "local:0/../x"}, "contains '..'"),
    ({"source": "/etc"}, "not a Hub id"),
    ({"source": "local:0/adapters/nothing"}, "No adapter folder"),
    ({"name": "Bad Name"}, "Adapter name 'bad name' is refused"),
    ({"name": "demo"}, "is a deployment's name"),
]


@pytest.mark.parametrize(("change", "words"), REFUSALS)
def test_bad_input_is_refused_and_changes_nothing(
    operator: Any, root: Path, change: dict[str, str], words: str
) -> None:
    d = deployment(operator, root)
    before = (DeploymentAdapter.objects.count(), AuditEvent.objects.count())
    with pytest.raises(DeploymentError, match=words):
        load(operator, d, **change)
    assert (DeploymentAdapter.objects.count(), AuditEvent.objects.count()) == before


def test_a_name_already_loaded_elsewhere_is_refused(operator: Any, root: Path) -> None:
    load(operator, deployment(operator, root, name="one"))
    with pytest.raises(DeploymentError, match="already loaded on one"):
        load(operator, deployment(operator, root, name="two"))


def test_a_deployment_without_lora_is_refused_with_what_to_do(operator: Any, root: Path) -> None:
    d = deployment(operator, root, lora=False)
    with pytest.raises(DeploymentError, match="launched without LoRA: launch it again on vLLM"):
        load(operator, d)


def test_a_stopped_deployment_takes_no_adapter(operator: Any, root: Path) -> None:
    d = deployment(operator, root)
    Deployment.objects.filter(name="demo").update(status="stopped")
    with pytest.raises(DeploymentError, match="is not running"):
        load(operator, d)


def test_a_viewer_and_another_teams_operator_are_refused(operator: Any, root: Path) -> None:
    from teams.models import Team

    d = deployment(operator, root)
    team = Team.objects.create(name="blue")
    team.members.add(operator)
    Deployment.objects.filter(name="demo").update(team=team)
    d.refresh_from_db()
    with pytest.raises(DeploymentError, match="needs Operator"):
        load(make_user("vic-viewer", "viewer"), d)
    with pytest.raises(DeploymentError, match="belongs to team blue"):
        load(make_user("oscar-other", "operator"), d)


def test_more_adapters_than_slots_says_what_vllm_does(operator: Any, root: Path) -> None:
    d = deployment(operator, root)
    load(operator, d)
    load(operator, d, name="other", source="local:0/adapters/other")
    make = make_demo_more(root)
    load(operator, d, name="third", source=make)
    note = adapters.slots_note(d, adapters.lora_of(d))
    assert note.startswith("3 adapters on 2 slots: at most 2 run in one batch")
    assert "keeps 4 loaded" not in note  # max_cpu_loras 4 holds them


def make_demo_more(root: Path) -> str:
    from deployments.catalog.demo_adapter import make_demo_adapter

    make_demo_adapter(root / "adapters" / "third", base_model=DEMO_BASE, seed=3)
    return "local:0/adapters/third"


def test_a_launch_may_not_take_a_loaded_adapters_name(operator: Any, root: Path) -> None:
    from deployments.lifecycle.checks import check_name

    load(operator, deployment(operator, root))
    with pytest.raises(DeploymentError, match="'good' is the name of a LoRA adapter"):
        check_name("good")
    assert check_name("fresh") == "fresh"
