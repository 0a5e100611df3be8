"""The URLconf of the lean /v1/ handler: resolving a gateway request walks these three only.

The same patterns are in the site's URLconf (playground.urls), so that they reverse by name.
Its error views answer in the gateway's JSON (the site's error pages link the site's pages,
which do not reverse here).
"""

from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase

from playground.gateway.asgi import as_api_error
from playground.urls import gateway_urlpatterns as urlpatterns

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]


def _error_view(status: int) -> Any:
    def view(request: HttpRequest, exception: Exception | None = None) -> HttpResponseBase:
        return as_api_error(HttpResponse(status=status))

    return view


handler400 = _error_view(400)
handler403 = _error_view(403)
handler404 = _error_view(404)
handler500 = _error_view(500)
