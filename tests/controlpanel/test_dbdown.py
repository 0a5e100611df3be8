"""The 500 handler: a database that does not answer is a 503 that says so; any other error
keeps the plain 500 page."""

from __future__ import annotations

import json
from typing import Any

from django.db import InterfaceError, OperationalError
from django.test import RequestFactory

from controlpanel import dbdown


def _handled(exc: Exception, accept: str) -> Any:
    request = RequestFactory().get("/deployments/1/", HTTP_ACCEPT=accept)
    try:
        raise exc
    except Exception:
        return dbdown.server_error(request)


def test_a_page_says_the_database_is_not_answering() -> None:
    response = _handled(OperationalError("connection refused"), "text/html")
    assert response.status_code == 503 and response["Retry-After"]
    assert b"The database is not answering" in response.content


def test_a_json_endpoint_gets_the_message_as_json() -> None:
    response = _handled(InterfaceError("connection already closed"), "application/json")
    assert response.status_code == 503
    assert json.loads(response.content) == {"ok": False, "error": dbdown.MESSAGE}


def test_any_other_error_is_the_plain_500_page() -> None:
    response = _handled(ValueError("a bug"), "text/html")
    assert response.status_code == 500 and b"Something went wrong" in response.content
