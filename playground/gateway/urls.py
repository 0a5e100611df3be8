"""The URLconf of the lean /v1/ handler: resolving a gateway request walks these only.

The site's URLconf (playground.urls) includes the same patterns, so that they reverse by name.
Its error views answer in the gateway's JSON (the site's error pages link the site's pages,
which do not reverse here).
"""

from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.urls import path

from playground.gateway import views
from playground.gateway.asgi import as_api_error

urlpatterns = [
    path("v1/chat/completions", views.chat_completions, name="gateway-chat"),
    path("v1/completions", views.completions, name="gateway-completions"),
    path("v1/models", views.models_list, name="gateway-models"),
    path("v1/responses", views.responses, name="gateway-responses"),
    path("v1/responses/<str:response_id>", views.response_get, name="gateway-response"),
    path(
        "v1/responses/<str:response_id>/cancel",
        views.response_cancel,
        name="gateway-response-cancel",
    ),
    path("v1/messages", views.messages, name="gateway-messages"),
    path("v1/messages/count_tokens", views.count_tokens, name="gateway-count-tokens"),
    path("v1/embeddings", views.embeddings, name="gateway-embeddings"),
]

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]


def _error_view(status: int) -> Any:
    def view(request: HttpRequest, exception: Exception | None = None) -> HttpResponseBase:
        return as_api_error(HttpResponse(status=status))

    return view


handler400 = _error_view(400)
handler403 = _error_view(403)
handler404 = _error_view(404)
handler500 = _error_view(500)
