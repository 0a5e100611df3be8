"""A host's CPU row beside its GPUs: the planner sees it as the host's CPU, and nothing that
means GPUs (inventory, counts, topology, quotas, the API's GPU lists) counts it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import RequestFactory

from controlpanel.api import fleet
from deployments import planning
from deployments.catalog import plan_targets
from deployments.catalog.registered import planner_host
from deployments.models import Deployment, Engine, GpuLease
from monitoring import selectors
from monitoring.models import CPU_INDEX, Gpu, Host
from teams.models import Team
from teams.quota import gpus_held
from tests.support.hosts import sim_host

GIB = 1 << 30
pytestmark = pytest.mark.django_db


def _lease(host: Host, index: int, nbytes: int, user: Any, team: Team | None = None) -> None:
    d = Deployment.objects.create(
        name=f"d{index}", model_id="m", engine=Engine.VLLM, host=host, created_by=user, team=team
    )
    GpuLease.objects.create(deployment=d, gpu=host.gpus.get(index=index), memory_bytes=nbytes)


def test_the_planner_gets_the_cpu_beside_the_gpus(operator: Any) -> None:
    host = sim_host("cpuhost", 2, ram_bytes=32 * GIB)
    _lease(host, CPU_INDEX, 4 * GIB, operator)
    planned = planner_host(host)
    assert [g.index for g in planned.gpus] == [0, 1]
    assert planned.cpu == planning.Cpu(
        name="Test EPYC",
        cores=2,
        total_bytes=32 * GIB,
        free_bytes=28 * GIB,  # less what other deployments reserved there
        numa_nodes=1,
        isa=("avx2",),
        arch="x86_64",
        core_ids=(0, 1),
        index=CPU_INDEX,
    )


def test_gpu_counts_topology_and_quotas_leave_the_cpu_out(operator: Any) -> None:
    host = sim_host("cpuhost", 2, ram_bytes=32 * GIB)
    team = Team.objects.create(name="t")
    _lease(host, CPU_INDEX, GIB, operator, team)
    _lease(host, 0, GIB, operator, team)
    assert list(Gpu.objects.gpus().values_list("index", flat=True)) == [0, 1]
    assert list(Gpu.objects.cpus().values_list("index", flat=True)) == [CPU_INDEX]
    choice = next(c for c in plan_targets.host_choices() if c.host.name == "cpuhost")
    assert (choice.gpus, choice.free_gpus) == (2, 1)
    assert selectors.topology_views()[0].headers == ["GPU0", "GPU1"]
    assert gpus_held(team.pk) == 1
    assert [d.index for d in selectors.present_devices(host)] == [0, 1, CPU_INDEX]  # charts


def test_the_api_lists_gpus_only() -> None:
    sim_host("cpuhost", 2, ram_bytes=32 * GIB)
    request = RequestFactory().get("/api/v1/gpus")
    assert [g["index"] for g in fleet.gpu_list(request)] == [0, 1]
    assert [g["index"] for g in fleet.host_list(request)[0]["gpus"]] == [0, 1]
