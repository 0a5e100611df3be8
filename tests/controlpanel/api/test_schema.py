"""The OpenAPI document: valid against the OpenAPI 3.1 meta-schema (the OpenAPI Initiative's
schema.json, tests/support/openapi-3.1-schema.json, checked with jsonschema's 2020-12
validator), every component a valid JSON Schema, every operation authenticated and its
refusals declared; the docs page served from our own static files, nothing from a CDN."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

pytestmark = pytest.mark.django_db

META = json.loads((Path(__file__).parents[2] / "support" / "openapi-3.1-schema.json").read_text())
OPERATIONS = {
    ("get", "/api/v1/deployments"),
    ("post", "/api/v1/deployments"),
    ("get", "/api/v1/deployments/{pk}"),
    ("post", "/api/v1/deployments/{pk}/stop"),
    ("post", "/api/v1/deployments/{pk}/scale"),
    ("put", "/api/v1/deployments/{pk}/idle"),
    ("get", "/api/v1/deployments/{pk}/adapters"),
    ("post", "/api/v1/deployments/{pk}/adapters"),
    ("delete", "/api/v1/deployments/{pk}/adapters/{name}"),
    ("get", "/api/v1/deployments/{pk}/scaling-policy"),
    ("put", "/api/v1/deployments/{pk}/scaling-policy"),
    ("delete", "/api/v1/deployments/{pk}/scaling-policy"),
    ("get", "/api/v1/hosts"),
    ("get", "/api/v1/gpus"),
    ("get", "/api/v1/plan"),
    ("get", "/api/v1/audit"),
    ("get", "/api/v1/usage"),
}


@pytest.fixture
def doc(viewer: Any) -> dict[str, Any]:
    client = Client()
    client.force_login(viewer)
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


def test_schema_is_valid_openapi_31(doc: dict[str, Any]) -> None:
    assert doc["openapi"].startswith("3.1")
    Draft202012Validator(META).validate(doc)
    for name, schema in doc["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema), name


def test_the_validator_catches_a_broken_document(doc: dict[str, Any]) -> None:
    broken = {**doc, "info": {"title": "no version"}}
    with pytest.raises(ValidationError):
        Draft202012Validator(META).validate(broken)
    bad_path = {**doc, "paths": {"no-leading-slash": {}}}
    with pytest.raises(ValidationError):
        Draft202012Validator(META).validate(bad_path)


def test_every_operation_is_authenticated_and_declares_its_refusals(doc: dict[str, Any]) -> None:
    found = {(m, p) for p, item in doc["paths"].items() for m in item}
    assert found == OPERATIONS
    schemes = doc["components"]["securitySchemes"]
    assert schemes["TokenAuth"] == {"type": "http", "scheme": "bearer"}
    assert schemes["SessionAuth"]["in"] == "cookie"
    for path, item in doc["paths"].items():
        for method, op in item.items():
            assert op["security"] == [{"TokenAuth": []}, {"SessionAuth": []}], (method, path)
            assert {"401", "403", "422"} <= set(op["responses"]), (method, path)
            assert re.search(r"scope", op.get("description", "")), (method, path)


def test_the_schema_needs_a_login() -> None:
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 401
    assert "Bearer" in response.json()["message"]
    page = Client().get("/api/v1/docs", HTTP_ACCEPT="text/html")
    assert page.status_code == 302 and page["Location"].startswith("/accounts/login/")


def test_the_docs_page_loads_nothing_from_outside(viewer: Any) -> None:
    client = Client()
    client.force_login(viewer)
    page = client.get("/api/v1/docs")
    assert page.status_code == 200
    html = page.content.decode()
    assert re.search(r'data-csrf-token="[^"]+"', html)  # "Try it out" writes with the session
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), html
    assets = re.findall(r"""(?:src|href)=["']/static/([^"']+)["']""", html)
    assert "ninja/swagger-ui-bundle.js" in assets
    for asset in assets:
        assert finders.find(asset), asset
    init = Path(str(finders.find("ninja/swagger-ui-init.js"))).read_text()
    assert "//cdn" not in init and "https://" not in init


def test_the_schema_names_the_wired_fields(doc: dict[str, Any]) -> None:
    """What an automation client needs: a deployment's team and hosts, the team and hosts a
    launch is for, the audit's keyset cursor and chain fields, usage's team and window."""
    schemas = doc["components"]["schemas"]
    assert {"team", "hosts"} <= set(schemas["DeploymentOut"]["required"])
    assert {"team", "hosts"} <= set(schemas["DeploymentCreateIn"]["properties"])
    assert {"seq", "prev_hash", "row_hash"} <= set(schemas["AuditOut"]["required"])
    assert set(schemas["AuditPageOut"]["properties"]) == {"items", "next_after_id"}
    assert {"quotas", "gpu_hours", "gateway_tokens"} <= set(schemas["UsageOut"]["required"])

    def params(path: str) -> set[str]:
        return {p["name"] for p in doc["paths"][path]["get"].get("parameters", [])}

    assert {"after_id", "limit", "action"} <= params("/api/v1/audit")
    assert "offset" not in params("/api/v1/audit")
    assert {"days", "team"} <= params("/api/v1/usage")
    assert {"team"} <= params("/api/v1/deployments")
    assert {"target", "hosts"} <= params("/api/v1/plan")
