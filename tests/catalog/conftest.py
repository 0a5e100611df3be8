"""Catalog fixtures: the Hub stand-in wired into Django, a clean hub cache, model roots."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.utils import timezone

from deployments.catalog.hubaccess import _shared_client
from monitoring.models import Gpu, Host
from tests.conftest import LiveServer
from tests.hubstub import HubStub
from tests.hubstub.repos import FIXTURES

QWEN = "Qwen/Qwen2.5-7B-Instruct"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
BIG = "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"
TOKEN = "hf_catalog_user_token_5f2c9a1e"
GIB = 1 << 30


def clear_hub_cache() -> None:
    """Hub entries in Redis outlive test databases and are not keyed by endpoint: drop them."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    keys = list(client.scan_iter(match="*shardboard:hub:v1:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def hub(settings: Any) -> Iterator[HubStub]:
    """The stand-in, with Django pointed at it; request it before `asgi_server` (fork)."""
    stub = HubStub(tokens={TOKEN: {LLAMA}}).start()
    settings.HF_ENDPOINT = stub.url
    settings.HF_TOKEN = ""
    clear_hub_cache()
    _shared_client.cache_clear()
    yield stub
    stub.stop()
    _shared_client.cache_clear()
    clear_hub_cache()


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


def login_client(client: Any, user: Any) -> Any:
    client.force_login(user)
    return client
