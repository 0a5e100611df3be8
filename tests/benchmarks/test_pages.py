"""The benchmark pages through Django's test client: roles, the form's errors, start and cancel
with their audit rows, the JSON export, the comparison, the deployment page's section."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client

from benchmarks.models import BenchmarkRun
from controlpanel.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)

FORM = {
    "prompt_mean": "20",
    "prompt_kind": "fixed",
    "output_mean": "8",
    "output_kind": "fixed",
    "levels": "1,2",
    "per_level": "requests",
    "amount": "4",
}


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_roles(make_deployment, recorded_run, viewer, outsider) -> None:
    d = make_deployment()
    run = recorded_run(d, "a")
    assert Client().get(f"/benchmarks/{run.pk}/").status_code == 302  # to the login page
    assert client_for(outsider).get(f"/benchmarks/{run.pk}/").status_code == 403
    assert client_for(outsider).get(f"/benchmarks/{run.pk}/export/").status_code == 403
    assert client_for(viewer).get(f"/benchmarks/{run.pk}/").status_code == 200
    page = client_for(viewer).post(f"/deployments/{d.pk}/benchmarks/", FORM, follow=True)
    assert "needs the Operator role" in page.content.decode()
    assert client_for(viewer).post(f"/benchmarks/{run.pk}/cancel/").status_code == 403
    assert BenchmarkRun.objects.count() == 1


def test_bad_input_is_said_not_a_500(make_deployment, operator) -> None:
    d = make_deployment()
    c = client_for(operator)
    page = c.post(f"/deployments/{d.pk}/benchmarks/", {**FORM, "levels": "1,lots"})
    assert page.status_code == 200 and "whole numbers separated by commas" in page.content.decode()
    binary = SimpleUploadedFile("p.bin", b"\xff\xfe\x00bad")
    page = c.post(f"/deployments/{d.pk}/benchmarks/", {**FORM, "prompts_file": binary})
    assert page.status_code == 200 and "not UTF-8 text" in page.content.decode()
    page = c.post(f"/deployments/{d.pk}/benchmarks/", {**FORM, "amount": "0"})
    assert page.status_code == 200 and "greater than or equal to 1" in page.content.decode()
    stopped = make_deployment(name="off", status="stopped")
    page = c.post(f"/deployments/{stopped.pk}/benchmarks/", FORM, follow=True)
    assert "benchmark a running deployment" in page.content.decode()
    assert c.get("/benchmarks/compare/?a=x").status_code == 302
    assert c.get("/benchmarks/99999/").status_code == 404
    assert not BenchmarkRun.objects.exists()


def test_start_then_cancel_is_audited(make_deployment, operator) -> None:
    d = make_deployment()
    c = client_for(operator)
    upload = SimpleUploadedFile("prompts.txt", b"What is 2 + 2?\n\nName a colour.\n")
    page = c.post(
        f"/deployments/{d.pk}/benchmarks/", {**FORM, "label": "tp1", "prompts_file": upload}
    )
    run = BenchmarkRun.objects.get()
    assert run.workload["prompts"] == ["What is 2 + 2?", "Name a colour."]
    assert page.status_code == 302 and page["Location"] == f"/benchmarks/{run.pk}/"
    assert run.status == "pending" and run.label == "tp1" and run.workload["levels"] == [1, 2]
    assert run.layout["host"] == d.host.name and run.layout["simulated"]
    rate = {**FORM, "mode": "rate", "levels": "0.5,2", "max_concurrency": "4"}
    again = c.post(f"/deployments/{d.pk}/benchmarks/", rate, follow=True)
    assert "one run at a time" in again.content.decode()
    progress = c.get(f"/benchmarks/{run.pk}/progress/").json()
    assert progress == {"status": "pending", "progress": {}, "error": ""}
    c.post(f"/benchmarks/{run.pk}/cancel/")
    run.refresh_from_db()
    assert run.status == "cancelled" and run.cancel_requested
    actions = list(
        AuditEvent.objects.filter(action__startswith="benchmark.")
        .order_by("id")
        .values_list("action", "actor__username")
    )
    assert actions == [
        ("benchmark.start", operator.username),
        ("benchmark.cancel", operator.username),
    ]


def test_detail_export_compare_and_section(make_deployment, recorded_run, viewer) -> None:
    one, two = make_deployment("tp1"), make_deployment("tp2", tp=2)
    a, b = recorded_run(one, "tp1"), recorded_run(two, "tp2", speed=2.0)
    c = client_for(viewer)
    page = c.get(f"/benchmarks/{a.pk}/").content.decode()
    assert 'id="simulated-note"' in page and 'id="benchmark-data"' in page
    assert page.count('<tr data-level="') == 3 and "vllm bench serve" in page
    exported = c.get(f"/benchmarks/{a.pk}/export/")
    assert exported["Content-Disposition"] == f'attachment; filename="benchmark-{a.pk}.json"'
    data = json.loads(exported.content)
    assert [lv["load"] for lv in data["levels"]] == [1, 2, 4]
    assert data["levels"][0]["reading"]["kind"] and data["layout"]["tensor_parallel_size"] == 1
    assert data["gpu"]["t"] and set(data["gpu"]["gpus"]) == {"0"}
    assert data["plan_vs_measured"]["plan_max_concurrency"] == 3.5
    compare = c.get(f"/benchmarks/compare/?a={a.pk}&b={b.pk}").content.decode()
    assert compare.count('class="card compare-run"') == 2 and 'id="compare-data"' in compare
    section = c.get(f"/deployments/{one.pk}/benchmarks/section/").content.decode()
    assert 'data-col="sustained"' in section and "tp1" in section
    assert 'id="benchmarks"' in c.get(f"/deployments/{one.pk}/").content.decode()


def test_command_line_starts_a_run(make_deployment, operator, viewer) -> None:
    d = make_deployment()
    out = StringIO()
    call_command(
        "bench_deployment", d.name, "--user", operator.username, "--levels", "2,1",
        "--duration", "5", "--prompt", "16", "--output-kind", "uniform", "--output-spread", "2",
        stdout=out,
    )  # fmt: skip
    run = BenchmarkRun.objects.get()
    assert out.getvalue().startswith(f"benchmark {run.pk} started on {d.host.name}")
    assert run.workload["levels"] == [1, 2] and run.workload["duration_s"] == 5.0
    assert run.workload["output"] == {"mean": 64, "kind": "uniform", "spread": 2}
    for argv, message in [
        ([d.name, "--user", viewer.username], "role"),
        (["nope", "--user", operator.username], "No running deployment"),
        ([d.name, "--user", "nobody"], "No user"),
        ([str(d.pk), "--user", operator.username, "--levels", "a"], "whole numbers"),
    ]:
        with pytest.raises(CommandError, match=message):
            call_command("bench_deployment", *argv, stdout=StringIO())


def test_a_rate_run_is_labelled_by_its_rates(make_deployment, operator) -> None:
    d = make_deployment()
    c = client_for(operator)
    rate = {**FORM, "mode": "rate", "levels": "0.5,2", "max_concurrency": "4"}
    c.post(f"/deployments/{d.pk}/benchmarks/", rate)
    run = BenchmarkRun.objects.get()
    assert run.workload["mode"] == "rate" and run.workload["levels"] == [0.5, 2.0]
    assert run.workload["max_concurrency"] == 4
    page = c.get(f"/benchmarks/{run.pk}/").content.decode()
    assert "Throughput and latency vs request rate" in page and "req/s sent" in page
