"""The Models on hosts page: each host's cached models and disk, pre-fetch, cancel, delete.
Thin: `deployments.catalog.cache_services` does the work."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import Role, has_role, role_required
from deployments.catalog import cache_services
from deployments.catalog.selectors import session_hub_token
from deployments.models import CachedModel, ModelDownload


@require_GET
@role_required(Role.VIEWER)
def models_on_hosts(request: HttpRequest) -> HttpResponse:
    hosts = cache_services.hosts_cache()
    context = {
        "hosts": hosts,
        "is_operator": has_role(request.user, Role.OPERATOR),
        "prefill": request.GET.get("repo_id", "")[:200],
    }
    return render(request, "catalog/on_hosts.html", context)


@require_POST
@role_required(Role.OPERATOR)
def prefetch(request: HttpRequest) -> HttpResponse:
    try:
        rows = cache_services.prefetch_start(
            user=request.user,
            repo_id=request.POST.get("repo_id", ""),
            revision=request.POST.get("revision", ""),
            host_names=request.POST.getlist("hosts"),
            hub_token=session_hub_token(request.session),
            http_request=request,
        )
    except cache_services.CacheError as exc:
        messages.error(request, str(exc))
    else:
        where = ", ".join(r.host.name for r in rows)
        messages.success(request, f"Fetching {rows[0].repo_id} onto {where}.")
    return redirect("models_on_hosts")


@require_POST
@role_required(Role.OPERATOR)
def download_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    download = get_object_or_404(ModelDownload.objects.select_related("host"), pk=pk)
    try:
        cache_services.download_cancel(user=request.user, download=download, http_request=request)
        messages.success(request, f"Cancelling the download of {download.repo_id}.")
    except cache_services.CacheError as exc:
        messages.error(request, str(exc))
    return redirect("models_on_hosts")


@require_POST
@role_required(Role.OPERATOR)
def cached_delete(request: HttpRequest, pk: int) -> HttpResponse:
    cached = get_object_or_404(CachedModel.objects.select_related("host"), pk=pk)
    try:
        cache_services.cached_delete(user=request.user, cached=cached, http_request=request)
        messages.success(request, f"Deleting {cached.repo_id} from {cached.host.name}.")
    except cache_services.CacheError as exc:
        messages.error(request, str(exc))
    return redirect("models_on_hosts")
