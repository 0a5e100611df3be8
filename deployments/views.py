"""Views of this app."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlpanel.roles import Role, role_required


@role_required(Role.VIEWER)
def models_index(request: HttpRequest) -> HttpResponse:
    context = {
        "title": "Models",
        "message": "The model catalog is not available in this build yet.",
    }
    return render(request, "common/pending.html", context)
