"""Pages of the control panel itself: dashboard and audit list."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from controlpanel import selectors
from controlpanel.audittrail import export
from controlpanel.audittrail.checkpoint import chain_status
from controlpanel.hosts import HostRetireError, host_retire
from controlpanel.roles import Role, role_required
from deployments.lifecycle.engineprep import host_engines
from deployments.lifecycle.selectors import active_rows
from teams.membership import team_names


@role_required(Role.VIEWER)
def dashboard(request: HttpRequest) -> HttpResponse:
    team = request.GET.get("team", "")
    context = {
        "hosts": selectors.host_overview(),
        "live": selectors.live_data_status(),
        "deployments": active_rows(team),
        "teams": team_names(),
        "team": team,
        "engines": host_engines(),
    }
    return render(request, "controlpanel/dashboard.html", context)


@role_required(Role.ADMIN)
def audit_list(request: HttpRequest) -> HttpResponse:
    filters = selectors.AuditFilters.from_query(request.GET)
    page = Paginator(selectors.audit_events(filters), 50).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "rows": selectors.audit_rows(page),
        "filters": filters,
        "actions": selectors.audit_actions(),
        "chain": chain_status(now=timezone.now()),
    }
    return render(request, "controlpanel/audit.html", context)


@role_required(Role.ADMIN)
def audit_export(request: HttpRequest, fmt: str) -> HttpResponse | StreamingHttpResponse:
    if fmt not in export.FORMATS:
        raise Http404("The audit trail exports as .csv or .jsonl.")
    try:
        span = export.TimeRange.from_query(request.GET)
    except export.BadRange as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(
        export.export_lines(fmt, span), content_type=export.FORMATS[fmt]
    )
    name = f"shardboard-audit-{span.slug()}.{fmt}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_POST
@role_required(Role.ADMIN)
def host_retire_view(request: HttpRequest, name: str) -> HttpResponse:
    try:
        host_retire(user=request.user, name=name, http_request=request)
    except HostRetireError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{name} is retired; it comes back if its worker registers.")
    return redirect("dashboard")
