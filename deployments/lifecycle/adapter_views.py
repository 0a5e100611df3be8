"""The deployment page's LoRA adapter forms: load and unload. Thin: the services do the work."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from controlpanel.roles import Role, role_required
from deployments.catalog.selectors import session_hub_token
from deployments.lifecycle import adapters
from deployments.lifecycle.errors import DeploymentError
from deployments.models import Deployment


@require_POST
@role_required(Role.OPERATOR)
def adapter_load(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_object_or_404(Deployment, pk=pk)
    try:
        adapter = adapters.adapter_load(
            user=request.user,
            deployment=deployment,
            name=request.POST.get("name", ""),
            source=request.POST.get("source", ""),
            revision=request.POST.get("revision", ""),
            http_request=request,
            hub_token=session_hub_token(request.session),
        )
    except DeploymentError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Loading adapter {adapter.name} on {deployment.name}.")
        if note := adapters.slots_note(adapter.deployment, adapters.lora_of(adapter.deployment)):
            messages.info(request, note)
    return redirect(f"{_page(deployment)}#adapters")


@require_POST
@role_required(Role.OPERATOR)
def adapter_unload(request: HttpRequest, pk: int, name: str) -> HttpResponse:
    deployment = get_object_or_404(Deployment, pk=pk)
    try:
        adapters.adapter_unload(
            user=request.user, deployment=deployment, name=name, http_request=request
        )
    except DeploymentError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Unloading adapter {name}; running streams on it finish.")
    return redirect(f"{_page(deployment)}#adapters")


def _page(deployment: Deployment) -> str:
    return reverse("deployment_detail", args=[deployment.pk])
