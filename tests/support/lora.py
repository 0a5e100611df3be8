"""LoRA test helpers: the demo adapter under a model root, as a Hub repo of the stand-in, and
the real vLLM (its CPU build) started by hand with LoRA on, for tests that need an engine but
not a whole launch."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from deployments.catalog.demo_adapter import make_demo_adapter
from deployments.host import supervisor as sv
from deployments.host.enginebins import adapter_for
from tests.support.hubstub.repos import RepoFile, StubRepo
from tests.support.waiting import STATE_WAIT_S, wait_for

# The demo model's base name as the demo adapter names it; a model root holds it under this
# folder name, so the base check passes by name.
DEMO_BASE = "shardboard-demo-tiny-llama"
KV_BYTES = 128 << 20  # small: two engines fit beside the other tests
START_S = 600.0  # a vLLM start: 45 s on two quiet cores, minutes beside other test runs


def adapter_repo(repo_id: str, folder: Path) -> StubRepo:
    """The adapter folder's files as a Hub repo the stand-in serves whole."""
    files = {
        p.name: RepoFile(p.name, p.read_bytes(), p.stat().st_size, lfs=p.suffix == ".safetensors")
        for p in sorted(folder.iterdir())
        if p.is_file()
    }
    sha = hashlib.sha1("\n".join([repo_id, *files]).encode()).hexdigest()  # noqa: S324 - an id
    info = {
        "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],  # noqa: S324 - an id
        "id": repo_id,
        "modelId": repo_id,
        "author": repo_id.split("/")[0],
        "sha": sha,
        "private": False,
        "gated": False,
        "disabled": False,
        "library_name": "peft",
        "tags": ["peft", "lora"],
    }
    repo = StubRepo(info=info, refs={"main": sha})
    repo.files = files
    return repo


def model_root_with_adapters(root: Path, tiny_model: Path) -> Path:
    """`root` holding the demo model (as local:0/<DEMO_BASE>), a fitting adapter
    (local:0/adapters/good), one for another model's shapes (adapters/wide) and one of rank 16
    (adapters/rank16)."""
    import shutil

    if not (root / DEMO_BASE).exists():
        shutil.copytree(tiny_model, root / DEMO_BASE)
    make_demo_adapter(root / "adapters" / "good", base_model=DEMO_BASE)
    make_demo_adapter(root / "adapters" / "other", base_model=DEMO_BASE, seed=11)
    make_demo_adapter(
        root / "adapters" / "wide", base_model=DEMO_BASE, out_features={"q_proj": 256}
    )
    make_demo_adapter(root / "adapters" / "rank16", base_model=DEMO_BASE, rank=16)
    return root


@dataclass
class RealVllm:
    """A vLLM process started by hand (no deployment marker: no host worker takes it)."""

    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start_vllm(
    model: Path, served: str, log_dir: Path, *, env: dict[str, str] | None = None, **lora: Any
) -> RealVllm:
    """vLLM on the CPU serving `model` as `served`, LoRA on (max_loras, max_lora_rank), eager,
    a small KV cache, `env` added to its environment; returned once /v1/models answers."""
    from deployments.engines import LaunchSpec
    from deployments.engines.base import MARKER_ENV

    spec = LaunchSpec(
        deployment_id="lora-test",
        model=str(model),
        port=sv.find_free_port(),
        served_model_name=served,
        device="cpu",
        enforce_eager=True,
        max_model_len=512,
        kv_cache_memory_bytes=KV_BYTES,
        enable_lora=True,
        max_loras=lora.get("max_loras", 2),
        max_lora_rank=lora.get("max_lora_rank", 8),
    )
    command = adapter_for("vllm").build(spec)
    env = {**os.environ, **{k: v for k, v in command.env.items() if k != MARKER_ENV}, **(env or {})}
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # an empty one is an error to vLLM 0.32's envs.py
    log_path = log_dir / f"vllm-{spec.port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            list(command.argv),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    engine = RealVllm(spec.port, proc, log_path)
    try:
        wait_for(lambda: _answers(engine), timeout_s=START_S, interval_s=0.5)
    except BaseException:
        engine.stop()
        raise
    return engine


def _answers(engine: RealVllm) -> bool:
    if engine.proc.poll() is not None:
        raise AssertionError(f"vLLM exited ({engine.proc.returncode}):\n{engine.log()[-3000:]}")
    try:
        return httpx.get(f"{engine.base_url}/v1/models", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def wait_state(fetch: Any, wanted: Any, timeout_s: float = STATE_WAIT_S) -> Any:
    """Poll `fetch()` until it equals `wanted` (bounded)."""
    box: dict[str, Any] = {}

    def check() -> bool:
        box["v"] = fetch()
        return bool(box["v"] == wanted)

    try:
        wait_for(check, timeout_s=timeout_s, interval_s=0.2)
    except AssertionError:
        raise AssertionError(
            f"not {wanted!r} within {timeout_s} s: last {box.get('v')!r}"
        ) from None
    return box["v"]
