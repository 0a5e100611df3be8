"""/v1/models says which deployments embed and which generate, and the playground offers chat
only on those that generate (an embedding deployment is named, with where to call it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.test import Client

from deployments.handoff.snapshot import EngineArgs, PlanSnapshot
from deployments.models import Deployment
from tests.support.gateway import bearer_for

EMBEDDING_PLAN = PlanSnapshot(engine_args=EngineArgs(runner="pooling"), kv_cache_tokens=0)


def test_models_and_playground_tell_embedding_from_generation(
    make_deployment: Callable[..., Deployment], operator: Any
) -> None:
    make_deployment("chat", 1)
    embed = make_deployment("embed", 2, engine="vllm")
    Deployment.objects.filter(pk=embed.pk).update(plan=EMBEDDING_PLAN.to_json())
    answer = Client().get("/v1/models", headers=bearer_for(operator))
    assert answer.status_code == 200
    kinds = {m["id"]: m["kind"] for m in answer.json()["data"]}
    assert kinds == {"chat": "generation", "embed": "embedding"}
    page = Client()
    page.force_login(operator)
    html = page.get("/playground/").content.decode()
    assert 'value="chat"' in html and 'value="embed"' not in html
    assert "<strong>embed</strong>\n  is an embedding model" in html
    assert "/v1/embeddings" in html
