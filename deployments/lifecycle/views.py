"""Deployment pages: list, detail, launch, stop, restart, log tail. Thin: services do the work."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlpanel.roles import Role, role_required
from deployments.catalog.selectors import session_hub_token
from deployments.lifecycle import (
    dispatch,
    engineprep,
    launchphases,
    relaunch,
    scaling,
    selectors,
    services,
)
from deployments.lifecycle import planned_vs_measured as memory
from deployments.lifecycle.forms import LaunchForm
from deployments.models import Deployment
from teams import membership


def _session_hub_token(request: HttpRequest) -> str | None:
    """The Hub token the user set on the Models page (kept in their session only)."""
    return session_hub_token(request.session)


@role_required(Role.VIEWER)
def deployment_list(request: HttpRequest) -> HttpResponse:
    filters = selectors.ListFilters.from_query(request.GET)
    rows = selectors.deployment_rows(filters)
    progress = launchphases.progress_texts([row.d.pk for row in rows])
    context = {
        "rows": [(row, progress.get(row.d.pk, "")) for row in rows],
        "filters": filters,
        "hosts": selectors.host_names(),
        "statuses": selectors.STATUS_CHOICES,
        "teams": membership.team_names(),
    }
    return render(request, "deployments/list.html", context)


@role_required(Role.VIEWER)
def deployment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_object_or_404(Deployment.objects.select_related("host", "created_by"), pk=pk)
    return render(request, "deployments/detail.html", selectors.detail_context(deployment))


@role_required(Role.VIEWER)
def deployment_log(request: HttpRequest, pk: int) -> JsonResponse:
    deployment = get_object_or_404(Deployment, pk=pk)
    panel = selectors.log_panel(deployment)
    return JsonResponse(
        {
            "status": deployment.status,
            "log": panel.text,
            "last_id": panel.last_id,
            "live": panel.live,
            "note": panel.note,
        }
    )


@role_required(Role.VIEWER)
def deployment_memory(request: HttpRequest, pk: int) -> JsonResponse:
    deployment = get_object_or_404(Deployment.objects.select_related("host"), pk=pk)
    return JsonResponse({"status": deployment.status, **memory.memory_table(deployment)})


@role_required(Role.OPERATOR)
def deployment_new(request: HttpRequest) -> HttpResponse:
    teams = membership.launchable_team_names(request.user)
    form = LaunchForm(request.POST or None, initial=request.GET.dict(), teams=teams)
    if request.method == "POST" and form.is_valid():
        try:
            deployment = services.deployment_create(
                user=request.user,
                request=form.launch_request(),
                http_request=request,
                hub_token=_session_hub_token(request),
            )
        except services.DeploymentError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Launching {deployment.name} on {deployment.host.name}.")
            if waits := engineprep.waiting_note(deployment.host, deployment.engine):
                messages.warning(request, waits)
            if note := dispatch.queue_note(deployment):
                messages.warning(request, note)
            return redirect("deployment_detail", pk=deployment.pk)
    context = {
        "form": form,
        "host_engines": selectors.launch_hosts(),
        "engines": engineprep.host_engines(),
        "engines_next": request.path,
    }
    return render(request, "deployments/new.html", context)


@require_POST
@role_required(Role.OPERATOR)
def deployment_stop(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_object_or_404(Deployment, pk=pk)
    try:
        first = services.deployment_stop(
            user=request.user, deployment=deployment, http_request=request
        )
        messages.success(request, f"Stopping {deployment.name}.")
        if note := dispatch.queue_note(first):
            messages.warning(request, note)
    except services.DeploymentError as exc:
        messages.error(request, str(exc))
    return redirect("deployment_detail", pk=pk)


@require_POST
@role_required(Role.OPERATOR)
def deployment_relaunch(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_object_or_404(Deployment, pk=pk)
    try:
        new = relaunch.deployment_relaunch(
            user=request.user,
            deployment=deployment,
            http_request=request,
            hub_token=_session_hub_token(request),
        )
    except services.DeploymentError as exc:
        messages.error(request, str(exc))
        return redirect("deployment_detail", pk=pk)
    return redirect("deployment_detail", pk=new.pk)


@require_POST
@role_required(Role.OPERATOR)
def deployment_scale(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_object_or_404(Deployment, pk=pk)
    raw = request.POST.get("replicas", "").strip()
    if not raw.isdigit():
        messages.error(request, "Replicas: give a whole number, such as 2.")
        return redirect("deployment_detail", pk=pk)
    try:
        first = scaling.deployment_scale(
            user=request.user, deployment=deployment, replicas=int(raw), http_request=request
        )
    except services.DeploymentError as exc:
        messages.error(request, str(exc))
        return redirect("deployment_detail", pk=pk)
    messages.success(request, f"Scaling {first.name} to {int(raw)} replicas.")
    return redirect("deployment_detail", pk=first.pk)
