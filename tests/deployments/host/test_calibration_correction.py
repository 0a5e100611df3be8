"""Recorded vLLM start-ups, fed through the host's own path (the launch recorder the log shipper
hands each batch of lines to), become the rows the planner's correction is learned from: a plan
that counted more KV memory than vLLM had gives a correction; one as right as the planner is
gives none; a start planned with the correction learns from the uncorrected plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deployments.catalog.corrections import fleet_corrections
from deployments.handoff.snapshot import EngineArgs, GpuFigures, GpuSlot, PlanSnapshot
from deployments.host import launchphases
from deployments.models import Deployment, GpuLease, StartObservation
from deployments.planning.units import GIB, MIB
from monitoring.models import Host
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db
LOG = Path(__file__).parent / "startup_logs" / "vllm_0_33_tp2.log"  # 7.52 GiB, 53.61 GiB of KV
H100 = "NVIDIA H100 80GB HBM3"


def _start(
    user: Any, name: str, *, planned_kv_gib: float, applied: int = 0, simulated: bool = False
) -> StartObservation:
    host = sim_host(f"h-{name}", 2, gpu_bytes=round(79.19 * GIB), gpu_name=H100)
    # A GPU host unless asked: the log is an H100's
    Host.objects.filter(pk=host.pk).update(simulated=simulated)
    host.refresh_from_db()
    figures = GpuFigures(
        weights_bytes=round(7.48 * GIB),
        kv_cache_bytes=round(planned_kv_gib * GIB),
        cuda_graph_bytes=round(0.50 * GIB),
        correction_bytes=applied,
    )
    plan = PlanSnapshot(
        engine_args=EngineArgs(tensor_parallel_size=2, max_model_len=131072),
        model_ref="meta-llama/Llama-3.1-8B-Instruct",
        gpus=(tuple(GpuSlot(host.name, i) for i in range(2)),),
        per_gpu=(figures, figures),
        kv_cache_tokens=870_000,
        fits=True,
    )
    d = Deployment.objects.create(
        name=name, model_id=plan.model_ref, engine="vllm", host=host, status="starting",
        created_by=user, plan=plan.to_json(),
    )  # fmt: skip
    for gpu in host.gpus.all():
        GpuLease.objects.create(deployment=d, gpu=gpu, memory_bytes=70 * GIB, active=True)
    recorder = launchphases.open_for(d)
    lines = LOG.read_text(encoding="utf-8").splitlines()
    for first in range(0, len(lines), 5):  # in batches, as the shipper hands them
        recorder.feed(lines[first : first + 5])
    recorder.ready()
    return StartObservation.objects.get(deployment=d)


def test_starts_that_had_less_kv_than_planned_teach_a_correction(operator: Any) -> None:
    # the plan counted 54.50 GiB of KV; vLLM logged 53.61 GiB with 0.04 GiB more weights
    rows = [_start(operator, f"a{i}", planned_kv_gib=54.50) for i in range(3)]
    assert {r.planned_correction_bytes for r in rows} == {0}
    (c,) = fleet_corrections()
    assert (c.gpu_model, c.vllm_version, c.starts) == (H100, "0.33.0", 3)
    expected = round(54.50 * GIB) - round(53.61 * GIB) - (round(7.52 * GIB) - round(7.48 * GIB))
    assert c.outside_bytes == expected and c.spread_bytes == 0
    assert abs(expected - 0.85 * GIB) < MIB  # 54.50 - 53.61 - (7.52 - 7.48) GiB


def test_starts_the_planner_got_right_teach_none(operator: Any) -> None:
    for i in range(3):  # 0.05 GiB off once the weights are taken out: within the planner's error
        _start(operator, f"b{i}", planned_kv_gib=53.70)
    assert fleet_corrections() == ()


def test_a_start_planned_with_the_correction_counts_as_uncorrected(operator: Any) -> None:
    applied = round(0.85 * GIB)
    _start(operator, "c0", planned_kv_gib=54.50)
    _start(operator, "c1", planned_kv_gib=54.50)
    row = _start(operator, "c2", planned_kv_gib=54.50 - 0.85, applied=applied)
    assert row.planned_correction_bytes == applied  # from the snapshot, through the host path
    (c,) = fleet_corrections()
    assert c.starts == 3 and c.spread_bytes < 16 * MIB


def test_starts_on_simulated_gpus_teach_no_gpu_correction(operator: Any) -> None:
    # vLLM runs on the CPU in place of simulated GPUs: its figures are no H100's
    rows = [_start(operator, f"s{i}", planned_kv_gib=54.50, simulated=True) for i in range(3)]
    assert all(r.gpu_model != H100 for r in rows)
    assert fleet_corrections() == ()
