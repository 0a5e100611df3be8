"""The engines the hosts prepare: their state as JSON (the pages' catch-up), and a retry."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from controlpanel.roles import Role, role_required
from deployments.lifecycle import engineprep
from deployments.lifecycle.errors import DeploymentError
from deployments.live import prep


@role_required(Role.VIEWER)
def engines_state(request: HttpRequest) -> JsonResponse:
    rows = [
        prep.payload(row, group.host.name)
        for group in engineprep.host_engines()
        for row in group.rows
    ]
    return JsonResponse({"engines": rows})


@require_POST
@role_required(Role.OPERATOR)
def engine_retry(request: HttpRequest, host: str, engine: str) -> HttpResponse:
    try:
        row = engineprep.engine_prep_retry(
            user=request.user, host_name=host, engine=engine, http_request=request
        )
    except DeploymentError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Preparing {row.get_engine_display()} on {host} again.")
    back = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(back, {request.get_host()}, request.is_secure()):
        return redirect(back)
    return redirect("dashboard")
