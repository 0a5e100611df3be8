"""A real engine start (transformers serve on the tests' tiny model, on a simulated host's
worker process) lands its StartObservation, written by the host worker, and so reaches the
Planner accuracy page and `export_planner_cases`."""

from __future__ import annotations

import io
from importlib import metadata
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from deployments import planning
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import Deployment, Outcome, StartObservation
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

HOST = "calibhost"


def _running(d: Deployment, worker: Any) -> None:
    def status() -> str:
        d.refresh_from_db()
        return d.status

    try:
        wait_for(lambda: status() in ("running", "failed"), timeout_s=120, interval_s=0.3)
    except AssertionError:
        print(worker.log())
        raise
    assert d.status == "running", d.failure_reason


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(300)  # a launch alone may wait 120 s for its own message
def test_a_real_start_lands_in_the_accuracy_page_and_the_export(
    host_worker: Any, model_root: Any, operator: Any, admin_user: Any, client: Client
) -> None:
    worker = start_sim_worker(host_worker, HOST, model_root)
    request = LaunchRequest(
        name="calib-tiny",
        model_ref="local:0/tiny",
        host_name=HOST,
        engine="transformers",
        plan_request=planning.PlanRequest(),
    )
    d = deployment_create(user=operator, request=request)
    _running(d, worker)
    # the row is written before the status moves to running (the recorder's ready)
    row = StartObservation.objects.get(deployment=d)
    assert (row.engine, row.outcome, row.attempt) == ("transformers", Outcome.OK, 0)
    assert row.engine_version == metadata.version("transformers")
    assert row.measured_weight_tensors is not None and row.measured_weight_tensors > 0
    assert row.measured_weights_bytes is None  # transformers serve prints no memory figure
    assert row.planned_weights_bytes and row.planned_weights_bytes > 0
    assert row.model_family == "dense" and row.gpu_model == ""  # it ran on the CPU

    client.force_login(admin_user)
    page = client.get("/planner-accuracy/").content.decode()
    assert "calib-tiny" in page and f"transformers {row.engine_version}" in page
    detail = client.get(f"/deployments/{d.pk}/").content.decode()
    assert 'id="start-figures"' in detail
    out = io.StringIO()
    call_command("export_planner_cases", stdout=out)
    header, line = out.getvalue().splitlines()
    case = dict(zip(header.split("\t"), line.split("\t"), strict=True))
    assert case["obs_id"] == f"SB-{d.pk}-0" and case["expect_status"] == "ok"
    assert case["note"] == f"engine transformers {row.engine_version}"
    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: Deployment.objects.get(pk=d.pk).status == "stopped", timeout_s=60)
