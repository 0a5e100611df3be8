"""The deployment page's Autoscaling section (an HTML fragment), its form and chart data."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlpanel.roles import Role, has_role, role_required
from deployments.autoscale import selectors, services
from deployments.autoscale.forms import PolicyForm
from deployments.lifecycle.errors import DeploymentError
from deployments.models import Deployment


def _first(pk: int) -> Deployment:
    d = get_object_or_404(Deployment, pk=pk)
    return Deployment.objects.select_related("host").get(pk=d.group_id)


@role_required(Role.VIEWER)
def section(request: HttpRequest, pk: int) -> HttpResponse:
    context = selectors.section_context(_first(pk))
    context["is_operator"] = has_role(request.user, Role.OPERATOR)
    return render(request, "deployments/_autoscale.html", context)


@role_required(Role.VIEWER)
def chart(request: HttpRequest, pk: int) -> JsonResponse:
    return JsonResponse(selectors.chart(_first(pk)))


@require_POST
@role_required(Role.OPERATOR)
def policy(request: HttpRequest, pk: int) -> HttpResponse:
    first = _first(pk)
    try:
        if request.POST.get("clear"):
            services.policy_clear(user=request.user, deployment=first, http_request=request)
            messages.success(request, f"Autoscaling of {first.name} is off.")
        else:
            form = PolicyForm(request.POST)
            if not form.is_valid():
                errors = "; ".join(str(e) for errs in form.errors.values() for e in errs)
                raise DeploymentError(f"Scaling policy: {errors}")
            services.policy_set(
                user=request.user,
                deployment=first,
                settings=form.policy_settings(),
                http_request=request,
            )
            messages.success(request, f"Scaling policy of {first.name} saved.")
    except DeploymentError as exc:
        messages.error(request, str(exc))
    return redirect("deployment_detail", pk=pk)
