"""One contract for every GpuBackend: the simulated one always, NVML where a GPU exists."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from itertools import combinations
from pathlib import Path

import pytest

from monitoring.gpus import GpuBackend, GpuBackendError, HostSample, get_backend
from monitoring.gpus.base import THROTTLE_REASONS, TOPOLOGY_LEVELS
from monitoring.gpus.simulated import SimulatedBackend

MIB = 1024 * 1024
ENGINE_MEMORY_BYTES = 1024 * MIB

# Starts an engine-like process holding ENGINE_MEMORY_BYTES on GPU 0; returns it.
EngineStarter = Callable[[], subprocess.Popen[bytes]]


def _nvml_backend() -> GpuBackend:
    try:
        backend = get_backend("nvml", simulated_spec="", state_dir=Path("/nonexistent"))
    except GpuBackendError as exc:
        pytest.skip(f"no NVIDIA GPU here: {exc}")
    if not backend.devices():
        pytest.skip("NVML answers but sees no GPU")
    return backend


@pytest.fixture(params=["simulated", pytest.param("nvml", marks=pytest.mark.gpu)])
def backend(request: pytest.FixtureRequest, sim_state_dir: Path) -> Iterator[GpuBackend]:
    if request.param == "nvml":
        b = _nvml_backend()
    else:
        b = SimulatedBackend("2xRTX4090-24GB@pcie,2xA100-40GB@nvlink", state_dir=sim_state_dir)
    yield b
    b.close()


@pytest.fixture
def start_engine(backend: GpuBackend) -> Iterator[EngineStarter]:
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        if isinstance(backend, SimulatedBackend):
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            backend.attach(proc.pid, [0], ENGINE_MEMORY_BYTES, 60.0, name="engine")
        else:
            if importlib.util.find_spec("torch") is None:
                pytest.skip("a real CUDA process needs torch, not installed here")
            code = (
                f"import torch, time; x = torch.empty({ENGINE_MEMORY_BYTES}, dtype=torch.uint8,"
                " device='cuda:0'); print('ready', flush=True); time.sleep(120)"
            )
            proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
            assert proc.stdout is not None and proc.stdout.readline().startswith(b"ready")
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _wait_for(
    backend: GpuBackend, cond: Callable[[HostSample], bool], timeout_s: float = 10
) -> HostSample:
    deadline = time.monotonic() + timeout_s
    while True:
        sample = backend.sample()
        if cond(sample) or time.monotonic() > deadline:
            return sample
        time.sleep(0.1)


def test_devices_match_samples(backend: GpuBackend) -> None:
    devices = backend.devices()
    sample = backend.sample()
    assert [d.index for d in devices] == list(range(len(devices)))
    assert [(g.index, g.uuid) for g in sample.gpus] == [(d.index, d.uuid) for d in devices]
    assert len({d.uuid for d in devices}) == len(devices)
    for device, gpu in zip(devices, sample.gpus, strict=True):
        assert device.memory_total_bytes > 0 and device.name
        assert gpu.memory_total_bytes == device.memory_total_bytes
    assert abs(sample.ts_ms - time.time() * 1000) < 5000


def test_memory_used_plus_free_is_total(backend: GpuBackend) -> None:
    for gpu in backend.sample().gpus:
        assert gpu.memory_used_bytes is not None and gpu.memory_free_bytes is not None
        assert gpu.memory_total_bytes is not None
        slack_bytes = gpu.memory_total_bytes * 0.02  # NVML v2 keeps "reserved" outside both
        assert (
            abs(gpu.memory_used_bytes + gpu.memory_free_bytes - gpu.memory_total_bytes)
            <= slack_bytes
        )


def test_metrics_in_range(backend: GpuBackend) -> None:
    for gpu in backend.sample().gpus:
        assert not gpu.lost and gpu.error is None
        for pct in (gpu.gpu_util_pct, gpu.mem_util_pct, gpu.fan_pct):
            assert pct is None or 0 <= pct <= 100
        assert gpu.temperature_c is None or 0 < gpu.temperature_c < 120
        if gpu.power_mw is not None and gpu.power_limit_mw is not None:
            assert 0 <= gpu.power_mw <= gpu.power_limit_mw * 1.2
        assert set(gpu.throttle_reasons) <= THROTTLE_REASONS


def test_topology_symmetric_and_complete(backend: GpuBackend) -> None:
    n = len(backend.devices())
    links = backend.topology()
    pairs = [(link.a, link.b) for link in links]
    assert sorted(pairs) == list(combinations(range(n), 2))
    for link in links:
        assert link.level in TOPOLOGY_LEVELS
        assert (link.level == "NV") == (link.nvlink_count > 0)


def test_engine_process_appears_with_memory_and_goes_when_it_dies(
    backend: GpuBackend, start_engine: EngineStarter
) -> None:
    before = backend.sample().gpus[0].memory_used_bytes or 0
    proc = start_engine()

    sample = _wait_for(backend, lambda s: proc.pid in {p.pid for p in s.gpus[0].processes})
    (process,) = [p for p in sample.gpus[0].processes if p.pid == proc.pid]
    assert process.used_memory_bytes is None or process.used_memory_bytes >= ENGINE_MEMORY_BYTES
    assert (sample.gpus[0].memory_used_bytes or 0) - before >= ENGINE_MEMORY_BYTES * 0.9

    proc.kill()
    proc.wait()
    sample = _wait_for(backend, lambda s: proc.pid not in {p.pid for p in s.gpus[0].processes})
    assert proc.pid not in {p.pid for p in sample.gpus[0].processes}
    assert abs((sample.gpus[0].memory_used_bytes or 0) - before) < ENGINE_MEMORY_BYTES * 0.1


def test_lost_gpu_is_reported_not_raised(backend: GpuBackend) -> None:
    if not isinstance(backend, SimulatedBackend):
        pytest.skip("a GPU cannot be lost on purpose on real hardware")
    backend.lose(1)
    sample = backend.sample()
    assert sample.gpus[1].lost and sample.gpus[1].error
    assert sample.gpus[1].memory_used_bytes is None
    assert not sample.gpus[0].lost and sample.gpus[0].memory_used_bytes is not None
    backend.restore(1)
    assert not backend.sample().gpus[1].lost
