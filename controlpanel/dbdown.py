"""A database that does not answer (restarting, unreachable) is a 503 that says so, not a 500.

Django raises OperationalError or InterfaceError from the first query of a request; the 500
handler turns them into a page that says what happened and that a retry will do, or, for the
JSON endpoints, an error in the shape the pages' scripts read. Nothing is lost: no write of
that request committed.
"""

from __future__ import annotations

import logging
import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views import defaults

log = logging.getLogger(__name__)
MESSAGE = "The database is not answering (restarting or unreachable). Try again in a moment."
RETRY_AFTER_S = "5"


def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 handler (urls.handler500): called while the exception is being handled.

    A middleware cannot do this: an error raised before the view (the session or the user
    loaded by the log-in check) is turned into a response without reaching process_exception.
    """
    exc = sys.exc_info()[1]
    if isinstance(exc, OperationalError | InterfaceError):
        log.warning("%s %s: database unavailable: %s", request.method, request.path, exc)
        return unavailable(request)
    return defaults.server_error(request)


def unavailable(request: HttpRequest) -> HttpResponse:
    if "text/html" in request.headers.get("Accept", ""):
        body = render_to_string("503.html", {"message": MESSAGE})
        response = HttpResponse(body, status=503)
    else:
        response = JsonResponse({"ok": False, "error": MESSAGE}, status=503)
    response["Retry-After"] = RETRY_AFTER_S
    return response
