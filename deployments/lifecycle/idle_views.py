"""The deployment page's idle setting: sleep (or scale to zero) after N minutes idle."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from controlpanel.roles import Role, role_required
from deployments.lifecycle import idle
from deployments.lifecycle.errors import DeploymentError
from deployments.models import Deployment


@require_POST
@role_required(Role.OPERATOR)
def deployment_idle(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_object_or_404(Deployment, pk=pk)
    raw = request.POST.get("sleep_after_min", "").strip()
    try:
        minutes = float(raw) if raw else None
    except ValueError:
        messages.error(request, "Sleep after: a number of minutes, such as 15, or blank.")
        return redirect("deployment_detail", pk=pk)
    try:
        first = idle.idle_setting_update(
            user=request.user,
            deployment=deployment,
            sleep_after_s=idle.minutes_to_s(minutes),
            http_request=request,
        )
    except DeploymentError as exc:
        messages.error(request, str(exc))
        return redirect("deployment_detail", pk=pk)
    said = f"after {raw} min without a request" if minutes is not None else "never"
    messages.success(request, f"{first.name} sleeps {said}.")
    return redirect("deployment_detail", pk=pk)
