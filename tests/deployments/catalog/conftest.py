"""Catalog fixtures: model roots, the server forked after the Hub settings, a simulated host."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from monitoring.models import Gpu, Host
from tests.support.catalog import GIB
from tests.support.hubstub import HubStub
from tests.support.hubstub.repos import FIXTURES
from tests.support.live_server import LiveServer


@pytest.fixture
def model_roots(tmp_path: Path, settings: Any) -> dict[str, Path]:
    """One model root with a model, and an outside folder holding a config.json with a marker."""
    root = tmp_path / "models"
    (root / "qwen-local").mkdir(parents=True)
    shutil.copy(
        FIXTURES / "configs" / "Qwen__Qwen2.5-7B-Instruct.json", root / "qwen-local" / "config.json"
    )
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_text(
        json.dumps({"architectures": ["SecretOutsideForCausalLM"]})
    )
    (root / "escape").symlink_to(outside, target_is_directory=True)
    settings.MODEL_ROOTS = [root]
    return {"root": root, "outside": outside}


@pytest.fixture
def live(hub: HubStub, asgi_server: LiveServer) -> LiveServer:
    """The ASGI server forked after the Hub settings are in place."""
    return asgi_server


@pytest.fixture
def sim_host(db: None) -> Host:
    host = Host.objects.create(
        name="sim-a",
        queue="host.sim-a",
        backend="simulated",
        simulated=True,
        last_heartbeat=timezone.now(),
    )
    for index in range(2):
        Gpu.objects.create(
            host=host,
            index=index,
            uuid=f"GPU-sim-a-{index}",
            name="H100 80GB (simulated)",
            memory_total_bytes=80 * GIB,
        )
    return host
