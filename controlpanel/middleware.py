"""Refuse NUL characters in the path, the query and form fields with a 400 naming the field.

PostgreSQL stores no NUL: a value with one, used in a filter or saved, fails deep inside a
query and surfaces as a server error. Django's form fields refuse it, but list filters,
path parameters and the like read the raw values.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

# Not multipart: parsing it here would consume the stream that a view may read as the body.
_FORMS = ("application/x-www-form-urlencoded",)


class RefuseNulMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        field = nul_field(request)
        if field is None:
            return self.get_response(request)
        message = f"{field}: null characters are not allowed."
        if "text/html" in request.headers.get("Accept", ""):  # a page: the browser shows it
            return HttpResponseBadRequest(message + "\n", content_type="text/plain")
        # a fetch() of a JSON endpoint: the shape the plan panel and the APIs answer errors in
        return JsonResponse({"ok": False, "error": message}, status=400)


def nul_field(request: HttpRequest) -> str | None:
    """The name of the first place holding a NUL character, or None."""
    if "\x00" in request.path:
        return "The address"
    sources = [request.GET]
    if request.method == "POST" and request.content_type in _FORMS:
        sources.append(request.POST)
    for source in sources:
        for key, values in source.lists():
            if "\x00" in key or any("\x00" in value for value in values):
                return key if key.isprintable() else ascii(key)
    return None
