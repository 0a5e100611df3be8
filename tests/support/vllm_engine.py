"""The real vLLM for tests: its CPU build (scripts/vllm.sh), started through the project's own
adapter and supervisor as a host worker starts it, in eager mode with a small KV space.

A start takes 30 s to minutes on a loaded 2-core machine (imports, then the engine core and
its worker process), so a test module shares one engine; a start that is expected to fail waits
for the engine's own exit. One vLLM process tree is ~2 GB of RAM plus its KV space.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from deployments.engines import EngineCommand, LaunchSpec, get_adapter
from deployments.host import supervisor as sv
from deployments.host.enginebins import executable
from tests.support.waiting import wait_for

KV_BYTES = 128 << 20  # 134,217,728: small, as a test's engine shares RAM with the run
MAX_MODEL_LEN = 512  # the demo model's max_position_embeddings
SERVED = "tiny"
# A real start on a 2-core machine: 30 s alone; 136 s at TP 1 and over 240 s at TP 2 seen beside
# other helpers' engines (load average 15-20).
START_S = 360.0
# One test that starts an engine: its start, its requests and its stop.
ENGINE_TEST_TIMEOUT_S = 600
# vllm/v1/core/kv_cache_utils.py:2327 (0.32), the engine's own sizing line
LOGGED_KV_TOKENS = re.compile(r"CPU KV cache size: (?P<n>[\d,]+) tokens")


def vllm_binary() -> str:
    """The vLLM a host worker here would run (SHARDBOARD_VLLM_BIN, else scripts/vllm.sh's);
    the test is skipped where none is installed (make test installs it)."""
    found = executable("vllm")
    if not found:
        pytest.skip("no vLLM: run scripts/vllm.sh (make test does) or set SHARDBOARD_VLLM_BIN")
    return found


def cpu_spec(model: Path, **overrides: Any) -> LaunchSpec:
    """vLLM on this host's CPU as the adapter is given it: eager, a small KV space."""
    fields: dict[str, Any] = {
        "deployment_id": "vllm-test",
        "model": str(model),
        "port": sv.find_free_port(),
        "served_model_name": SERVED,
        "device": "cpu",
        "max_model_len": MAX_MODEL_LEN,
        "kv_cache_memory_bytes": KV_BYTES,
        "enforce_eager": True,
        # An owner no host worker is: the reconcile of another test run's worker on this
        # machine, which stops unowned engines no row claims, leaves it alone.
        "owner": "tests@vllm_engine",
        **overrides,
    }
    return LaunchSpec(**fields)


@dataclass(frozen=True)
class Engine:
    command: EngineCommand
    handle: sv.EngineHandle

    @property
    def url(self) -> str:
        return self.command.base_url

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def log(self) -> str:
        return self.handle.log_path.read_text(errors="replace")

    def logged_kv_tokens(self) -> int:
        found = LOGGED_KV_TOKENS.search(self.log())
        assert found, "vLLM logged no CPU KV cache size"
        return int(found["n"].replace(",", ""))

    def processes(self) -> list[psutil.Process]:
        """Every live process of the engine's group (API server, engine core, workers)."""
        return [p for p in psutil.process_iter(["pid"]) if _in_group(p, self.handle.pgid)]

    def core(self) -> psutil.Process:
        """The engine core process (vLLM names it VLLM::EngineCore)."""
        return wait_for(
            lambda: next((p for p in self.processes() if _named(p, "EngineCore")), None)
        )


def spawn(spec: LaunchSpec, log_path: Path, more_argv: tuple[str, ...] = ()) -> Engine:
    """`more_argv`: flags given to vLLM past the adapter, which would refuse them."""
    command = get_adapter("vllm", executable=vllm_binary()).build(spec)
    command = replace(command, argv=(*command.argv, *more_argv))
    return Engine(command, sv.spawn(command.argv, command.env, log_path))


@contextmanager
def running(spec: LaunchSpec, log_path: Path) -> Iterator[Engine]:
    """The engine, once its readiness probe passed; stopped (its whole group) after the block."""
    engine = spawn(spec, log_path)
    try:
        ready = sv.wait_ready(
            engine.url, engine.command.probe, START_S, lambda: sv.handle_alive(engine.handle)
        )
        assert ready.ready, f"{ready}\n{sv.tail(log_path, 80)}"
        core_beside_workers(engine)
        yield engine
    finally:
        sv.stop(engine.handle, grace_s=20.0)


def core_beside_workers(engine: Engine) -> None:
    """The engine core's threads onto its workers' cores, where this machine has a core to spare.

    vLLM's CPU build binds its workers' OpenMP threads to every core but those it keeps for the
    engine core (one per rank), and there the engine core's busy loop and the API server share
    the one core left on a 2-core machine. The API server, starved, took in a burst of 10
    requests one by one and answered /metrics seconds late: the scheduler saw no queue in 3 of 6
    rounds. Beside its workers, which it waits on step by step, the engine core leaves the API
    server a core, as a GPU host's engine core does: 6 rounds of 6 ran in pairs, the queue of 8
    seen in each, every scrape answered within 0.3 s. No other effect on what vLLM does."""
    processes = engine.processes()
    workers: set[int] = set()
    for process in processes:
        if _named(process, "VLLM::Worker"):
            workers |= set(process.cpu_affinity())
    if not workers or workers >= set(os.sched_getaffinity(0)):
        return
    for process in processes:
        if not _named(process, "EngineCore"):
            continue
        for thread in process.threads():
            try:
                os.sched_setaffinity(thread.id, workers)
            except OSError:  # a thread that ended meanwhile
                continue


def run_until_exit(
    spec: LaunchSpec, log_path: Path, more_argv: tuple[str, ...] = ()
) -> tuple[sv.ExitInfo, str]:
    """A start that the engine refuses: its exit and its log."""
    engine = spawn(spec, log_path, more_argv)
    try:
        gone = wait_for(lambda: sv.poll_exit(engine.handle), START_S, interval_s=0.5)
    finally:
        sv.stop(engine.handle, grace_s=5.0)
    return gone, engine.log()


def write_llama(out: Path, tokenizer_from: Path, **shape: int) -> Path:
    """A random-weight Llama of another shape beside the demo model, with its tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tokenizer_from / name).is_file():
            shutil.copy(tokenizer_from / name, out / name)
    base = json.loads((tokenizer_from / "config.json").read_text())
    base = {k: v for k, v in base.items() if k not in ("architectures", "transformers_version")}
    LlamaForCausalLM(LlamaConfig(**{**base, **shape})).save_pretrained(out)
    return out


def _in_group(process: psutil.Process, pgid: int) -> bool:
    try:
        return os.getpgid(process.pid) == pgid
    except (ProcessLookupError, psutil.Error):
        return False


def _named(process: psutil.Process, name: str) -> bool:
    try:
        return name in process.name() or any(name in part for part in process.cmdline())
    except psutil.Error:
        return False
