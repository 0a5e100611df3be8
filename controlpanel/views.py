"""Pages of the control panel itself: dashboard and audit list."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from controlpanel import selectors
from controlpanel.hosts import HostRetireError, host_retire
from controlpanel.roles import Role, role_required
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
    }
    return render(request, "controlpanel/dashboard.html", context)


@role_required(Role.ADMIN)
def audit_list(request: HttpRequest) -> HttpResponse:
    filters = selectors.AuditFilters.from_query(request.GET)
    page = Paginator(selectors.audit_events(filters), 50).get_page(request.GET.get("page"))
    context = {"page": page, "filters": filters, "actions": selectors.audit_actions()}
    return render(request, "controlpanel/audit.html", context)


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
