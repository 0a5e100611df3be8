"""Recorded starts in, the learned correction out, the plan changed by it: on the plan panel
of a registered host, with its line; unchanged when switched off (per plan, or for the
installation), and not fed back on itself by starts whose plan already applied one."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from deployments.catalog.corrections import fleet_corrections
from deployments.models import Deployment, Outcome, StartObservation
from deployments.planning import DEFAULT_VLLM_VERSION
from tests.support.catalog import QWEN, login_client
from tests.support.hosts import sim_host
from tests.support.hubstub import HubStub

pytestmark = pytest.mark.django_db
GIB = 2**30
MIB = 2**20
H100 = "NVIDIA H100 80GB HBM3"
TOTAL = 80 * GIB
VERSION = DEFAULT_VLLM_VERSION  # what the plan panel targets


def _start(
    d: Deployment,
    attempt: int,
    *,
    residual: int,
    weights_off: int = 0,
    applied: int = 0,
    **row: Any,
) -> StartObservation:
    """A start whose plan counted ``residual`` bytes of KV cache that vLLM did not have,
    beyond ``weights_off`` bytes of weights more than planned."""
    planned_kv = 50 * GIB - applied  # a plan that applied ``applied`` had that much less KV
    fields: dict[str, Any] = {
        "deployment": d,
        "attempt": attempt,
        "recorded_at": timezone.now(),
        "outcome": Outcome.OK,
        "engine": "vllm",
        "engine_version": VERSION,
        "gpu_model": H100,
        "gpu_total_bytes": TOTAL,
        "planned_weights_bytes": 15 * GIB,
        "measured_weights_bytes": 15 * GIB + weights_off,
        "planned_kv_bytes": planned_kv,
        "measured_kv_bytes": 50 * GIB - residual - weights_off,
        "planned_correction_bytes": applied,
    }
    return StartObservation.objects.create(**{**fields, **row})


@pytest.fixture
def deployment(operator: Any) -> Deployment:
    host = sim_host("h-calib", 1, gpu_bytes=TOTAL, gpu_name=H100)
    return Deployment.objects.create(
        name="calib", model_id=QWEN, engine="vllm", host=host, status="stopped",
        created_by=operator,
    )  # fmt: skip


def test_consistent_starts_give_a_correction(deployment: Deployment) -> None:
    for i, r in enumerate((700 * MIB, 760 * MIB, 720 * MIB)):
        _start(deployment, i, residual=r, weights_off=(i + 1) * 100 * MIB)
    # not this host's error: a failed start, another engine, a start without KV figures
    _start(deployment, 10, residual=5 * GIB, outcome=Outcome.FAILED)
    _start(deployment, 11, residual=5 * GIB, engine="transformers")
    _start(deployment, 12, residual=5 * GIB, measured_kv_bytes=None)
    (c,) = fleet_corrections()
    assert (c.gpu_model, c.vllm_version, c.starts) == (H100, VERSION, 3)
    assert c.outside_bytes == 720 * MIB  # the weights' own error taken out
    assert c.spread_bytes == 60 * MIB


def test_a_start_planned_with_the_correction_learns_from_the_uncorrected_plan(
    deployment: Deployment,
) -> None:
    for i in range(3):
        _start(deployment, i, residual=720 * MIB, applied=720 * MIB if i else 0)
    (c,) = fleet_corrections()
    assert c.outside_bytes == 720 * MIB  # not 0 nor halved by its own application


def test_too_few_or_mixed_starts_give_none(deployment: Deployment) -> None:
    _start(deployment, 0, residual=700 * MIB)
    _start(deployment, 1, residual=700 * MIB)
    assert fleet_corrections() == ()
    _start(deployment, 2, residual=-700 * MIB)
    assert fleet_corrections() == ()


def test_switched_off_for_the_installation(deployment: Deployment, settings: Any) -> None:
    for i in range(3):
        _start(deployment, i, residual=720 * MIB)
    settings.SHARDBOARD_PLANNER_CORRECTION = False
    assert fleet_corrections() == ()


def test_the_plan_panel_applies_it_with_its_line_and_not_when_off(
    client: Client, viewer: Any, hub: HubStub, deployment: Deployment
) -> None:
    login_client(client, viewer)

    def panel(**params: str) -> dict[str, Any]:
        response = client.get("/models/plan/", {"ref": QWEN, "target": "h-calib", **params})
        assert response.status_code == 200, response.content
        return dict(response.json()["plan"])

    plain = panel()
    for i in range(3):
        _start(deployment, i, residual=GIB)
    corrected = panel()
    off = panel(learned_correction="off")
    line = next(w for w in corrected["warnings"] if w.startswith("learned correction applied"))
    assert f"1.00 GiB more memory outside PyTorch per GPU for {H100} under vLLM {VERSION}" in line
    assert "from 3 recorded starts" in line
    drop = plain["per_gpu"][0]["kv_cache_bytes"] - corrected["per_gpu"][0]["kv_cache_bytes"]
    assert drop == GIB and corrected["per_gpu"][0]["correction_bytes"] == GIB
    assert corrected["kv_cache_tokens"] < plain["kv_cache_tokens"]
    assert corrected["launch"]["learned_correction"] == "on"
    assert off["per_gpu"] == plain["per_gpu"] and off["kv_cache_tokens"] == plain["kv_cache_tokens"]
    assert not any("learned correction" in w for w in off["warnings"])
    assert off["launch"]["learned_correction"] == "off"
    api = client.get("/api/v1/plan", {"ref": QWEN, "target": "h-calib"}).json()["plan"]
    api_off = client.get(
        "/api/v1/plan", {"ref": QWEN, "target": "h-calib", "learned_correction": "off"}
    ).json()["plan"]
    assert api["kv_cache_tokens"] == corrected["kv_cache_tokens"]
    assert api_off["kv_cache_tokens"] == plain["kv_cache_tokens"]


def test_the_accuracy_page_lists_the_learned_corrections(
    client: Client, admin_user: Any, deployment: Deployment, settings: Any
) -> None:
    for i in range(3):
        _start(deployment, i, residual=GIB + i * 100 * MIB)
    client.force_login(admin_user)
    table = client.get("/planner-accuracy/").content.decode().split('id="accuracy-corrections"')[1]
    row = table.split("</tbody>")[0]
    assert H100 in row and VERSION in row
    assert "1.10 GiB" in row and "0.20 GiB" in row  # the median applied; the spread
    settings.SHARDBOARD_PLANNER_CORRECTION = False
    page = client.get("/planner-accuracy/").content.decode()
    assert "off: SHARDBOARD_PLANNER_CORRECTION" in page
    assert H100 not in page.split('id="accuracy-corrections"')[1].split("</tbody>")[0]
