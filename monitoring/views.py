"""The topology page and the Prometheus endpoint (bearer token, never open by default)."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from controlpanel.roles import Role, role_required
from monitoring import selectors
from monitoring.prom import GpuCollector


@role_required(Role.VIEWER)
def topology(request: HttpRequest) -> HttpResponse:
    context = {"views": selectors.topology_views(), "legend": selectors.LEGEND}
    return render(request, "monitoring/topology.html", context)


def bearer_token(request: HttpRequest) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def metrics_refusal(request: HttpRequest) -> HttpResponse | None:
    """403 while no METRICS_TOKEN is configured, 401 for a missing or wrong token."""
    expected = settings.METRICS_TOKEN
    if not expected:
        return HttpResponse(
            "Metrics are disabled: set METRICS_TOKEN and scrape with "
            "'Authorization: Bearer <token>'.\n",
            status=403,
            content_type="text/plain",
        )
    given = bearer_token(request)
    if given is None or not hmac.compare_digest(given.encode(), expected.encode()):
        response = HttpResponse(
            "Missing or wrong bearer token.\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return None


@login_not_required
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refusal = metrics_refusal(request)
    if refusal is not None:
        return refusal
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuCollector(selectors.metric_snapshots))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
