"""An embedding model from a local folder (a sentence-transformers BERT): the catalog and the
planner see a pooling model, the launch spawns `vllm serve` with vLLM 0.33's pooling flags (a
stand-in engine process: vLLM needs CUDA), the smoke test asks for an embedding, /v1/models
says the deployment embeds, and transformers serve is refused up front."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone

from controlpanel.celery import host_queue
from deployments.catalog.sources import load_spec, resolve_source
from deployments.host import engine_control as runner
from deployments.lifecycle.services import (
    DeploymentError,
    LaunchRequest,
    deployment_create,
    deployment_stop,
)
from deployments.models import Deployment, GpuLease, Status
from monitoring.models import Gpu, Host
from tests.support.gateway import bearer_for
from tests.support.processes import ROOT

pytestmark = pytest.mark.django_db(transaction=True)
STUB_ENGINE = ROOT / "tests" / "support" / "stub_engine.py"
HOST = "embedhost"
GIB = 1 << 30
BERT = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 512,
    "max_position_embeddings": 128,
    "type_vocab_size": 2,
    "torch_dtype": "float32",
}
MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {
        "idx": 2,
        "name": "2",
        "path": "2_Normalize",
        "type": "sentence_transformers.models.Normalize",
    },
]
POOLING = {"word_embedding_dimension": 64, "pooling_mode_mean_tokens": True}


@pytest.fixture
def embed_root(tmp_path: Path, settings: Any) -> Path:
    """`local:0/minilm`: config.json, modules.json and 1_Pooling/config.json, no weights."""
    folder = tmp_path / "models" / "minilm"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(BERT))
    (folder / "modules.json").write_text(json.dumps(MODULES))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(POOLING))
    settings.MODEL_ROOTS = [tmp_path / "models"]
    return folder


@pytest.fixture
def gpu_host(db: None) -> Iterator[Host]:
    """A real-GPU host row (vLLM's kind of host); this process plays its worker."""
    host = Host.objects.create(
        name=HOST, queue=host_queue(HOST), backend="nvml", last_heartbeat=timezone.now()
    )
    Gpu.objects.create(host=host, index=0, uuid="GPU-0", name="H100", memory_total_bytes=80 * GIB)
    yield host
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.delete(host_queue(HOST))  # the tasks enqueued for a worker this test does not run
    client.close()


def test_catalog_reads_a_local_embedding_folder(embed_root: Path) -> None:
    spec = load_spec(resolve_source("local:0/minilm"))
    assert spec.pooling is not None
    assert (spec.pooling.task, spec.pooling.pooling_type) == ("embed", "MEAN")
    assert spec.pooling.normalize and spec.encoder_only
    plain = embed_root.parent / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({**BERT, "architectures": ["BertForMaskedLM"]}))
    assert load_spec(resolve_source("local:0/plain")).pooling is not None  # registry: pooling


def test_launch_passes_the_pooling_flags_and_models_says_embedding(
    embed_root: Path,
    gpu_host: Host,
    operator: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHARDBOARD_VLLM_BIN", str(STUB_ENGINE))
    request = LaunchRequest(name="emb", model_ref="local:0/minilm", host_name=HOST, engine="vllm")
    d = deployment_create(user=operator, request=request)
    snapshot = d.snapshot
    assert snapshot.embeds and snapshot.kv_cache_tokens == 0
    assert all(g.kv_cache_bytes == 0 for g in snapshot.per_gpu)
    gmu = snapshot.engine_args.gpu_memory_utilization
    assert gmu is not None and gmu <= 0.05  # sized to the encoder, not vLLM's 92 %
    lease = GpuLease.objects.get(deployment=d)
    assert lease.memory_bytes < 4 * GIB
    try:
        # the smoke test asks /v1/embeddings: the stand-in refuses completions when pooling
        assert runner.launch(d.pk).get("running") == d.pk
        d.refresh_from_db()
        argv = httpx.get(f"{d.base_url}/stub/argv", timeout=5).json()["argv"]
        assert argv[argv.index("--runner") + 1] == "pooling"
        assert "--convert" not in argv  # BertModel is vLLM's own pooling class
        assert argv[argv.index("--gpu-memory-utilization") + 1] == f"{gmu:g}"
        client = Client()
        answer = client.get("/v1/models", headers=bearer_for(operator))
        assert answer.status_code == 200
        assert [(m["id"], m["kind"]) for m in answer.json()["data"]] == [("emb", "embedding")]
        page = Client()
        page.force_login(operator)
        playground = page.get("/playground/").content.decode()
        assert 'id="embedding-note"' in playground and 'value="emb"' not in playground
        detail = page.get(f"/deployments/{d.pk}/").content.decode()
        assert 'id="model-kind">embedding model<' in detail
        assert "no KV cache (an encoder)" in detail and 'id="kv-tokens"' not in detail
    finally:
        deployment_stop(user=operator, deployment=d)
        runner.stop(d.pk)
    d.refresh_from_db()
    assert d.status == Status.STOPPED


def test_transformers_serve_is_refused_for_an_embedding_model(
    embed_root: Path, gpu_host: Host, operator: Any
) -> None:
    request = LaunchRequest(
        name="emb-tf", model_ref="local:0/minilm", host_name=HOST, engine="transformers"
    )
    with pytest.raises(DeploymentError, match="no /v1/embeddings route"):
        deployment_create(user=operator, request=request)
    assert not Deployment.objects.exists() and not GpuLease.objects.exists()
