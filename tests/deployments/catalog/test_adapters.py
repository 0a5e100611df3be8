"""LoRA adapters in the catalog: local folders under the model roots and Hub repos, read from
adapter_config.json and the safetensors header alone; sources that lead outside are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deployments.catalog.adapters import (
    AdapterSourceError,
    list_local_adapters,
    read_adapter,
    resolve_local_adapter,
)
from deployments.catalog.demo_adapter import make_demo_adapter
from tests.support.hubstub import HubStub
from tests.support.lora import DEMO_BASE, adapter_repo


@pytest.fixture
def root(tmp_path: Path, settings: Any) -> Path:
    base = tmp_path / "models"
    make_demo_adapter(base / "adapters" / "good", base_model=DEMO_BASE)
    settings.MODEL_ROOTS = [base]
    return base


def test_a_local_adapter_is_read_from_its_config_and_header(root: Path) -> None:
    found = read_adapter("local:0/adapters/good")
    spec = found.spec
    assert (found.ref, found.revision, found.is_local) == ("local:0/adapters/good", "", True)
    assert (spec.base_model, spec.rank, spec.alpha) == (DEMO_BASE, 8, 16.0)
    assert spec.modules == ("q_proj", "v_proj")
    # 2 layers × (q: 8×128 + 128×8, v: 8×128 + 64×8) float32
    assert spec.size_bytes == 2 * (8 * 128 + 128 * 8 + 8 * 128 + 64 * 8) * 4
    assert {t.shape for t in spec.tensors} == {(8, 128), (128, 8), (64, 8)}


def test_the_roots_are_listed_with_their_adapters(root: Path) -> None:
    (root / "adapters" / "broken").mkdir()
    (root / "adapters" / "broken" / "adapter_config.json").write_text("{not json")
    listed = {a.ref: a for a in list_local_adapters()}
    assert listed["local:0/adapters/good"].spec is not None
    broken = listed["local:0/adapters/broken"]
    assert broken.spec is None and "adapter_model.safetensors" in (broken.error or "")


@pytest.mark.parametrize(
    ("ref", "words"),
    [
        ("local:0/../elsewhere", "contains '..'"),
        ("local:0//etc", "is absolute"),
        ("/etc/passwd", "not a Hub id"),
        ("../adapters/good", "not a Hub id"),
        ("local:0/adapters", "no adapter_config.json"),
        ("local:7/adapters/good", "no model root number 7"),
        ("local:0/link", "leads outside"),
        ("", "Choose an adapter"),
    ],
)
def test_sources_outside_the_roots_are_refused(root: Path, tmp_path: Path, ref: str, words: str):
    outside = make_demo_adapter(tmp_path / "elsewhere")
    (root / "link").symlink_to(outside)
    with pytest.raises(AdapterSourceError, match=words):
        read_adapter(ref)


def test_a_header_that_is_not_safetensors_is_refused(root: Path) -> None:
    (root / "adapters" / "good" / "adapter_model.safetensors").write_bytes(b"\xff" * 4)
    with pytest.raises(AdapterSourceError, match="too short to be a safetensors file"):
        read_adapter("local:0/adapters/good")


def test_the_host_resolves_a_ref_against_its_own_roots(tmp_path: Path) -> None:
    host_root = tmp_path / "host-models"
    make_demo_adapter(host_root / "adapters" / "good")
    folder = resolve_local_adapter("local:0/adapters/good", roots=[host_root])
    assert folder == (host_root / "adapters" / "good").resolve()


@pytest.mark.django_db
def test_a_hub_adapter_is_read_with_a_range_request(
    hub: HubStub, tmp_path: Path, settings: Any
) -> None:
    folder = make_demo_adapter(tmp_path / "hub-adapter", base_model="org/base")
    hub.add_repo(adapter_repo("sbtest/demo-lora", folder))
    hub.reset_requests()
    found = read_adapter("sbtest/demo-lora")
    assert found.ref == "sbtest/demo-lora" and len(found.revision) == 40
    assert (found.spec.rank, found.spec.base_model) == (8, "org/base")
    weights = [r for r in hub.requests if r.path.endswith("adapter_model.safetensors")]
    assert weights and all(r.range for r in weights if r.method == "GET"), "header reads only"
    config = json.loads((folder / "adapter_config.json").read_text())
    assert found.spec.target_modules == tuple(config["target_modules"])


@pytest.mark.django_db
def test_a_missing_hub_adapter_is_named(hub: HubStub) -> None:
    with pytest.raises(AdapterSourceError, match="sbtest/nothing-here"):
        read_adapter("sbtest/nothing-here")
