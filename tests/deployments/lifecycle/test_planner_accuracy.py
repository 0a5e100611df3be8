"""Recorded vLLM start-up logs fed through the host's own path (the launch recorder the log
shipper hands each batch of lines to) land one StartObservation per start; the Planner
accuracy page, the deployment page and `export_planner_cases` show them."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from deployments.handoff.snapshot import EngineArgs, GpuFigures, GpuSlot, PlanSnapshot
from deployments.host import launchphases
from deployments.lifecycle.planner_cases import COLUMNS
from deployments.models import Deployment, GpuLease, Outcome, StartObservation
from deployments.planning.units import GIB
from monitoring.models import Host
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db
LOGS = Path(__file__).parents[1] / "host" / "startup_logs"
SHARED_CASES = Path("/work/shared/planner-cases/cases.tsv")


def _deployment(user: Any, name: str, *, tp: int, max_len: int, kv_tokens: int) -> Deployment:
    host = sim_host(f"h-{name}", tp, gpu_bytes=round(79.19 * GIB), gpu_name="NVIDIA H100 80GB HBM3")
    # A start on real GPUs (the logs are an H100's): on simulated ones the engine runs on the
    # CPU, whose figures calibration keeps under no GPU.
    Host.objects.filter(pk=host.pk).update(simulated=False)
    host.simulated = False
    plan = PlanSnapshot(
        engine_args=EngineArgs(
            tensor_parallel_size=tp, max_model_len=max_len, gpu_memory_utilization=0.9
        ),
        model_ref="meta-llama/Llama-3.1-8B-Instruct",
        gpus=(tuple(GpuSlot(host.name, i) for i in range(tp)),),
        per_gpu=tuple(
            GpuFigures(
                weights_bytes=round(7.48 * GIB),
                kv_cache_bytes=round(53.70 * GIB),
                cuda_graph_bytes=round(0.50 * GIB),
            )
            for _ in range(tp)
        ),
        kv_cache_tokens=kv_tokens,
        fits=True,
    )
    d = Deployment.objects.create(
        name=name, model_id=plan.model_ref, engine="vllm", host=host, status="starting",
        created_by=user, plan=plan.to_json(),
    )  # fmt: skip
    for gpu in host.gpus.all():
        GpuLease.objects.create(deployment=d, gpu=gpu, memory_bytes=70 * GIB, active=True)
    return d


def _feed(d: Deployment, log: str, *, ready: bool) -> None:
    recorder = launchphases.open_for(d)
    lines = (LOGS / log).read_text(encoding="utf-8").splitlines()
    for start in range(0, len(lines), 5):  # in batches, as the shipper hands them
        recorder.feed(lines[start : start + 5])
    recorder.ready() if ready else recorder.close()


def test_a_vllm_start_lands_its_figures_beside_the_plan(operator: Any) -> None:
    d = _deployment(operator, "llama8b", tp=2, max_len=131072, kv_tokens=870_000)
    _feed(d, "vllm_0_33_tp2.log", ready=True)
    row = StartObservation.objects.get(deployment=d)
    assert (row.engine, row.engine_version, row.outcome) == ("vllm", "0.33.0", Outcome.OK)
    assert row.gpu_model == "NVIDIA H100 80GB HBM3" and row.tensor_parallel_size == 2
    assert row.measured_weights_bytes == round(7.52 * GIB)
    assert row.measured_kv_tokens == 878_320 and row.planned_kv_tokens == 870_000
    assert row.measured_kv_bytes == round(53.61 * GIB)
    assert row.measured_cuda_graph_bytes == round(0.62 * GIB)
    assert row.planned_weights_bytes == round(7.48 * GIB)
    # a second ready of the same start (a duplicate delivery) writes no second row
    launchphases.open_for(d).ready()
    assert StartObservation.objects.filter(deployment=d).count() == 1


def test_a_start_refused_for_memory_is_a_flagged_false_fit(
    operator: Any, admin_user: Any, client: Client
) -> None:
    ok = _deployment(operator, "llama8b", tp=2, max_len=131072, kv_tokens=870_000)
    _feed(ok, "vllm_0_33_tp2.log", ready=True)
    refused = _deployment(operator, "gptoss", tp=1, max_len=131072, kv_tokens=150_000)
    _feed(refused, "vllm_0_33_kv_refused.log", ready=False)
    row = StartObservation.objects.get(deployment=refused)
    assert row.outcome == Outcome.FAILED and row.planned_fits
    assert row.failure.startswith("To serve at least one request")

    client.force_login(operator)
    assert client.get("/planner-accuracy/").status_code in (302, 403)
    client.force_login(admin_user)
    page = client.get("/planner-accuracy/").content.decode()
    starts = page.split('id="accuracy-starts"')[1]
    assert starts.index("gptoss") < starts.index("llama8b")  # the false fit leads
    assert "false fit" in starts and "+0.95 %" in starts  # (878320 - 870000) / 878320 = 0.95 %
    detail = client.get(f"/deployments/{ok.pk}/").content.decode()
    assert 'id="start-figures"' in detail and "+0.95 %" in detail and "+0.53 %" in detail


def test_a_start_stopped_before_ready_without_a_memory_error_is_not_a_case(operator: Any) -> None:
    d = _deployment(operator, "stopped", tp=1, max_len=8192, kv_tokens=1000)
    _feed(d, "transformers_5_23_cpu.log", ready=False)
    assert not StartObservation.objects.filter(deployment=d).exists()


def test_the_export_has_the_shared_cases_columns(operator: Any, tmp_path: Path) -> None:
    d = _deployment(operator, "llama8b", tp=2, max_len=131072, kv_tokens=870_000)
    _feed(d, "vllm_0_33_tp2.log", ready=True)
    refused = _deployment(operator, "gptoss", tp=1, max_len=131072, kv_tokens=150_000)
    _feed(refused, "vllm_0_33_kv_refused.log", ready=False)
    out = tmp_path / "cases.tsv"
    call_command("export_planner_cases", "--output", str(out), stderr=io.StringIO())
    header, *lines = out.read_text(encoding="utf-8").splitlines()
    if SHARED_CASES.exists():  # the shared columns first, the one format's optional ones after
        shared = SHARED_CASES.read_text(encoding="utf-8").splitlines()[0]
        assert header.split("\t")[: len(shared.split("\t"))] == shared.split("\t")
    assert tuple(header.split("\t")) == COLUMNS
    cases = [dict(zip(COLUMNS, line.split("\t"), strict=True)) for line in lines]
    first, second = cases
    assert first["obs_id"] == f"SB-{d.pk}-0"
    assert first["model"] == "meta-llama__Llama-3.1-8B-Instruct"
    assert (first["tp"], first["pp"], first["max_model_len"]) == ("2", "1", "131072")
    assert (first["gpu_gib"], first["gmu"], first["vllm_version"]) == ("79.19", "0.9", "0.33.0")
    assert (first["expect_status"], first["weights_gib"], first["kv_tokens"]) == (
        "ok", "7.52", "878320",
    )  # fmt: skip
    assert first["kv_gib"] == "53.61" and first["note"] == ""
    assert second["expect_status"] == "failed" and second["kv_tokens"] == ""
    assert second["note"].startswith("To serve at least one request")
    only = io.StringIO()
    call_command("export_planner_cases", "--engine", "transformers", stdout=only)
    assert only.getvalue().splitlines() == [header]
