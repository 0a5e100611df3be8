"""The plan panel says why a hybrid or windowed model's numbers differ from a dense one's, and
an unknown layer kind is a warning on the plan, never an error page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.support.browser import login
from tests.support.catalog import login_client
from tests.support.hubstub import HubStub
from tests.support.live_server import LiveServer
from tests.support.planning import LLAMA_8B, fixture_config


@pytest.fixture
def hybrid_roots(tmp_path: Path, settings: Any) -> Path:
    root = tmp_path / "models"
    models = {
        "qwen3-next": fixture_config("Qwen--Qwen3-Next-80B-A3B-Thinking"),
        "gpt-oss": fixture_config("openai--gpt-oss-20b"),
        "llama": LLAMA_8B,
        "odd": {**LLAMA_8B, "layer_types": ["full_attention"] * 31 + ["quantum_attention"]},
    }
    for name, config in models.items():
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text(json.dumps(config))
    settings.MODEL_ROOTS = [root]
    return root


def plan_json(client: Client, name: str) -> dict[str, Any]:
    response = client.get(
        "/models/plan/", {"ref": f"local:0/{name}", "target": "whatif", "gpus": "4x141GiB"}
    )
    assert response.status_code == 200
    return response.json()


@pytest.mark.parametrize(
    ("name", "note"),
    [
        ("qwen3-next", "linear-attention state per sequence: 36 of 48 layers (Gated DeltaNet)"),
        ("gpt-oss", "window-sized KV for local layers: 12 of 24 layers"),
    ],
)
def test_plan_explains_the_layer_kinds(
    client: Client, viewer: Any, hub: HubStub, hybrid_roots: Path, name: str, note: str
) -> None:
    login_client(client, viewer)
    data = plan_json(client, name)
    assert data["ok"]
    assert any(n.startswith(note) for n in data["plan"]["layer_notes"])
    page = client.get(f"/models/local/0/{name}/").content.decode()
    notes = page.split('id="plan-layer-notes"')[1].split("</ul>")[0]
    assert note in notes


def test_dense_model_has_no_layer_notes(
    client: Client, viewer: Any, hub: HubStub, hybrid_roots: Path
) -> None:
    login_client(client, viewer)
    assert plan_json(client, "llama")["plan"]["layer_notes"] == []


def test_unknown_layer_kind_is_a_warning(
    client: Client, viewer: Any, hub: HubStub, hybrid_roots: Path
) -> None:
    login_client(client, viewer)
    data = plan_json(client, "odd")
    assert data["ok"]
    assert any("'quantum_attention'" in w for w in data["plan"]["warnings"])
    page = client.get("/models/local/0/odd/")
    assert page.status_code == 200
    assert "estimated as full attention" in page.content.decode()


def test_browser_redraws_the_notes_with_the_plan(
    hybrid_roots: Path, page: Any, live: LiveServer, operator: Any
) -> None:
    login(page, live, operator.username)
    page.goto(f"{live.url}/models/local/0/qwen3-next/")
    page.wait_for_function("() => document.getElementById('plan-chart').data !== undefined")
    notes = page.locator("#plan-layer-notes li")
    # what-if 4x80GiB: TP 4, a quarter of the 1.05 MiB Gated DeltaNet state on each GPU
    assert "0.26 MiB per GPU" in notes.first.inner_text()
    page.fill("input[name=tensor_parallel_size]", "2")
    page.wait_for_function(
        "() => document.querySelector('#plan-layer-notes li').textContent.includes('0.52 MiB')"
    )
    assert notes.first.inner_text().startswith("linear-attention state per sequence")
