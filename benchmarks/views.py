"""Benchmark pages: a deployment's runs and the form, a run, two runs compared, the export.
Thin: services write, selectors read."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from benchmarks import selectors, services
from benchmarks.forms import BenchmarkForm
from benchmarks.models import BenchmarkRun
from controlpanel.roles import Role, has_role, role_required
from deployments.models import Deployment


def _run(pk: int) -> BenchmarkRun:
    return get_object_or_404(
        BenchmarkRun.objects.select_related("deployment__host", "created_by"), pk=pk
    )


@role_required(Role.VIEWER)
def deployment_benchmarks(request: HttpRequest, pk: int) -> HttpResponse:
    d = get_object_or_404(Deployment.objects.select_related("host"), pk=pk)
    form = BenchmarkForm(request.POST or None, request.FILES or None)
    if request.method == "POST":
        if not has_role(request.user, Role.OPERATOR):
            messages.error(request, "Starting a benchmark needs the Operator role.")
            return redirect("deployment_benchmarks", pk=pk)
        if form.is_valid():
            try:
                run = services.run_start(
                    user=request.user,
                    deployment=d,
                    workload=form.cleaned_data["workload"].to_dict(),
                    label=form.cleaned_data.get("label") or "",
                    http_request=request,
                )
            except services.BenchmarkError as exc:
                messages.error(request, str(exc))
            else:
                return redirect("benchmark_detail", pk=run.pk)
    context = {"d": d, "form": form, "runs": selectors.runs_of(d)[:50]}
    return render(request, "benchmarks/deployment.html", context)


@role_required(Role.VIEWER)
def deployment_section(request: HttpRequest, pk: int) -> HttpResponse:
    d = get_object_or_404(Deployment.objects.select_related("host"), pk=pk)
    return render(request, "benchmarks/_section.html", selectors.deployment_section(d))


@role_required(Role.VIEWER)
def benchmark_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return render(request, "benchmarks/detail.html", selectors.run_context(_run(pk)))


@require_POST
@role_required(Role.OPERATOR)
def benchmark_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    run = _run(pk)
    try:
        services.run_cancel(user=request.user, run=run, http_request=request)
        messages.success(request, f"Cancelling {run.title}.")
    except services.BenchmarkError as exc:
        messages.error(request, str(exc))
    return redirect("benchmark_detail", pk=pk)


@role_required(Role.VIEWER)
def benchmark_export(request: HttpRequest, pk: int) -> HttpResponse:
    run = _run(pk)
    body = json.dumps(selectors.export(run), indent=2)
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="benchmark-{run.pk}.json"'
    return response


@role_required(Role.VIEWER)
def benchmark_progress(request: HttpRequest, pk: int) -> JsonResponse:
    run = _run(pk)
    return JsonResponse({"status": run.status, "progress": run.progress, "error": run.error})


@role_required(Role.VIEWER)
def benchmark_compare(request: HttpRequest) -> HttpResponse:
    try:
        a, b = int(request.GET.get("a", "")), int(request.GET.get("b", ""))
    except ValueError:
        messages.error(request, "Pick two runs to compare.")
        return redirect("deployments")
    context = selectors.compare_context(_run(a), _run(b))
    return render(request, "benchmarks/compare.html", context)
