"""The engine a launch asks for is the engine it gets (issue 37): on simulated GPUs vLLM's CPU
build runs in their place, never transformers serve instead of it. The launches never reach a
worker: the `db` fixture's transaction is rolled back before any on-commit task."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.models import AuditEvent
from deployments.models import Deployment
from playground.models import Scope
from playground.services import token_create
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db
HOST = "apiengines"
BODY = {"name": "chosen", "model_ref": "local:0/tiny", "host": HOST}


@pytest.fixture
def token(model_root: Any, operator: Any) -> str:
    sim_host(HOST, 4)
    _, raw = token_create(user=operator, name="api", scopes=(Scope.READ, Scope.DEPLOY))
    return f"Bearer {raw}"


def launch(token: str, **body: Any) -> Any:
    return Client().post("/api/v1/deployments", {**BODY, **body},
                         content_type="application/json", HTTP_AUTHORIZATION=token)  # fmt: skip


@pytest.mark.parametrize(
    ("asked", "program"),
    [({}, "vllm"), ({"engine": "vllm"}, "vllm"), ({"engine": "transformers"}, "transformers")],
)
def test_the_engine_asked_for_on_simulated_gpus_is_the_one_launched(
    token: str, asked: dict[str, str], program: str
) -> None:
    response = launch(token, **asked)
    assert response.status_code == 201, response.content
    out = response.json()
    engine = asked.get("engine", "vllm")  # the API's default engine is vLLM
    assert out["engine"] == engine and out["command"][0] == program
    row = Deployment.objects.get(pk=out["id"])
    assert row.engine == engine
    created = AuditEvent.objects.get(action="deployment.create", target_id=str(row.pk))
    assert created.detail["engine"] == engine
