from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from monitoring.gpus import GpuBackendError, get_backend
from monitoring.gpus.simspec import parse_spec
from monitoring.gpus.simulated import SimulatedBackend
from tests.support.processes import ROOT

GIB = 1024**3


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("4xH100-80GB@nvlink", [("H100-80GB", 4, "nvlink")]),
        ("H100", [("H100-80GB", 1, "pcie")]),
        ("8xA100-80GB@NVLINK", [("A100-80GB", 8, "nvlink")]),
        (
            "2xRTX4090-24GB@pcie, 2xA100-40GB@nvlink",
            [("RTX4090-24GB", 2, "pcie"), ("A100-40GB", 2, "nvlink")],
        ),
        ("1xl4", [("L4-24GB", 1, "pcie")]),
    ],
)
def test_spec_parses(spec: str, expected: list[tuple[str, int, str]]) -> None:
    assert [(g.model.key, g.count, g.link) for g in parse_spec(spec)] == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("4xH100,", "empty"),
        ("4xB999-80GB", "unknown simulated GPU model"),
        ("4xH100-40GB", "unknown simulated GPU model"),
        ("2xRTX4090-24GB@nvlink", "has no NVLink"),
        ("2xH100@infiniband", "unknown interconnect"),
        ("0xH100", "no GPUs"),
        ("65xH100", "more than 64"),
        ("4 H100", "bad simulated GPU group"),
    ],
)
def test_spec_rejects(spec: str, message: str) -> None:
    with pytest.raises(GpuBackendError, match=message) as info:
        parse_spec(spec)
    assert "\n" not in str(info.value)


def test_mixed_topology_levels(sim_state_dir: Path) -> None:
    b = SimulatedBackend("2xRTX4090-24GB@pcie,2xA100-40GB@nvlink,2xL4", state_dir=sim_state_dir)
    labels = {(link.a, link.b): (link.label, link.p2p_read_ok) for link in b.topology()}
    assert labels[(0, 1)] == ("PIX", False)  # GeForce: no P2P over PCIe
    assert labels[(2, 3)] == ("NV12", True)
    assert labels[(4, 5)] == ("PIX", True)
    assert labels[(0, 2)][0] == "PHB"  # same socket
    assert labels[(0, 4)][0] == "SYS"  # across sockets
    assert [d.name for d in b.devices()][::2] == [
        "NVIDIA GeForce RTX 4090",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA L4",
    ]


def test_deterministic_for_a_seed(tmp_path: Path, engine_process: subprocess.Popen[bytes]) -> None:
    def run(seed: int, name: str) -> list[object]:
        b = SimulatedBackend("2xH100", state_dir=tmp_path / name, seed=seed, clock_ms=lambda: 0)
        b.attach(engine_process.pid, [0], 10 * GIB, 70.0)
        return [replace(g, processes=()) for _ in range(20) for g in b.sample().gpus]

    assert run(3, "a") == run(3, "b")
    assert run(3, "c") != run(4, "d")


def test_load_drives_metrics(
    sim4: SimulatedBackend, engine_process: subprocess.Popen[bytes]
) -> None:
    idle = sim4.sample().gpus[0]
    sim4.attach(engine_process.pid, [0, 1], 30 * GIB, 95.0, name="vllm")
    for _ in range(30):
        busy = sim4.sample().gpus[0]
    assert idle.gpu_util_pct == 0 and "gpu_idle" in idle.throttle_reasons
    assert busy.gpu_util_pct is not None and busy.gpu_util_pct > 85
    assert busy.temperature_c is not None and idle.temperature_c is not None
    assert busy.temperature_c > idle.temperature_c + 20
    assert (
        busy.power_mw is not None
        and idle.power_mw is not None
        and busy.power_mw > 5 * idle.power_mw
    )
    assert busy.processes[0].name == "vllm"
    assert sim4.sample().gpus[2].gpu_util_pct == 0


def test_state_survives_a_new_backend_in_another_process(
    sim_state_dir: Path, sim4: SimulatedBackend, engine_process: subprocess.Popen[bytes]
) -> None:
    code = (
        "import sys; from pathlib import Path;"
        "from monitoring.gpus.simulated import SimulatedBackend;"
        "b = SimulatedBackend('4xH100-80GB@nvlink', state_dir=Path(sys.argv[1]));"
        "b.attach(int(sys.argv[2]), [3], 8 << 30, 50.0); b.throttle(2, 'hw_thermal_slowdown')"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(sim_state_dir), str(engine_process.pid)],
        check=True,
        cwd=ROOT,
    )
    gpus = sim4.sample().gpus
    assert [p.pid for p in gpus[3].processes] == [engine_process.pid]
    assert "hw_thermal_slowdown" in gpus[2].throttle_reasons
    sim4.restore(2)
    assert "hw_thermal_slowdown" not in sim4.sample().gpus[2].throttle_reasons


def test_thermal_throttle_heats_and_slows(sim4: SimulatedBackend) -> None:
    sim4.throttle(1, "sw_thermal_slowdown")
    for _ in range(40):
        gpus = sim4.sample().gpus
    assert gpus[1].temperature_c is not None and gpus[1].temperature_c > 80
    assert gpus[1].sm_clock_mhz is not None and gpus[0].sm_clock_mhz is not None
    assert gpus[1].sm_clock_mhz < gpus[0].sm_clock_mhz


def test_attach_checks_its_input(
    sim4: SimulatedBackend, engine_process: subprocess.Popen[bytes]
) -> None:
    with pytest.raises(GpuBackendError, match="out of memory"):
        sim4.attach(engine_process.pid, [0], 80 * GIB)
    with pytest.raises(GpuBackendError, match=r"not in 0\.\.3"):
        sim4.attach(engine_process.pid, [4], GIB)
    with pytest.raises(GpuBackendError, match="unknown throttle reason"):
        sim4.throttle(0, "too_hot")
    assert sim4.engines() == ()


def test_dead_pid_is_dropped_from_the_state(sim4: SimulatedBackend) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    sim4.attach(proc.pid, [0], GIB)
    assert sim4.sample().gpus[0].processes == ()
    assert sim4.engines() == ()


def test_get_backend_auto_falls_back_with_a_logged_reason(
    sim_state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="monitoring.gpus")
    try:
        import pynvml

        pynvml.nvmlInit()
        pytest.skip("a driver answers here: auto picks NVML")
    except pynvml.NVMLError:
        pass
    backend = get_backend("auto", simulated_spec="2xL4", state_dir=sim_state_dir)
    assert backend.simulated and len(backend.devices()) == 2
    assert "NVML unavailable" in caplog.text and "simulated" in caplog.text


def test_get_backend_rejects_bad_names(sim_state_dir: Path) -> None:
    with pytest.raises(GpuBackendError, match="unknown GPU backend 'cuda'"):
        get_backend("cuda", simulated_spec="2xL4", state_dir=sim_state_dir)
    with pytest.raises(GpuBackendError, match="unknown simulated GPU model"):
        get_backend("simulated", simulated_spec="2xQ9", state_dir=sim_state_dir)


def test_nvml_without_a_library_says_so(sim_state_dir: Path) -> None:
    try:
        backend = get_backend("nvml", simulated_spec="", state_dir=sim_state_dir)
    except GpuBackendError as exc:
        assert str(exc).startswith("NVML unavailable:")
        assert "\n" not in str(exc)
    else:
        assert not backend.simulated


@pytest.fixture
def second_engine() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    yield proc
    proc.kill()
    proc.wait()


def test_several_engines_share_a_gpu(
    sim4: SimulatedBackend,
    engine_process: subprocess.Popen[bytes],
    second_engine: subprocess.Popen[bytes],
) -> None:
    # a pipeline of two stages holding different shares, and a small engine beside stage 0
    sim4.attach(engine_process.pid, [0, 1], 30 * GIB, 60.0, name="big", memory_by_gpu={1: 20 * GIB})
    sim4.attach(second_engine.pid, [0], 18 * GIB, 30.0, name="small")
    gpus = sim4.sample().gpus
    baseline = 512 * 2**20
    assert gpus[0].memory_used_bytes == baseline + 48 * GIB
    assert gpus[1].memory_used_bytes == baseline + 20 * GIB
    assert gpus[0].memory_free_bytes == gpus[0].memory_total_bytes - gpus[0].memory_used_bytes
    by_pid = {p.pid: (p.used_memory_bytes, p.name) for p in gpus[0].processes}
    assert by_pid == {engine_process.pid: (30 * GIB, "big"), second_engine.pid: (18 * GIB, "small")}
    assert [p.used_memory_bytes for p in gpus[1].processes] == [20 * GIB]
    assert gpus[0].gpu_util_pct is not None and gpus[0].gpu_util_pct >= 80  # loads add up
    # the shares survive a reload of the state file by another process's backend
    again = SimulatedBackend(sim4.spec, state_dir=sim4._store.path.parent, seed=7)
    assert again.sample().gpus[1].memory_used_bytes == baseline + 20 * GIB


def test_an_engine_that_does_not_fit_beside_the_others_is_refused(
    sim4: SimulatedBackend,
    engine_process: subprocess.Popen[bytes],
    second_engine: subprocess.Popen[bytes],
) -> None:
    sim4.attach(engine_process.pid, [0], 60 * GIB, name="big")
    with pytest.raises(GpuBackendError, match="GPU 0 out of memory: 20480 MiB asked"):
        sim4.attach(second_engine.pid, [0], 20 * GIB, name="late")
    with pytest.raises(GpuBackendError, match="names GPUs"):
        sim4.attach(second_engine.pid, [1], GIB, memory_by_gpu={2: GIB})
    assert [e.name for e in sim4.engines()] == ["big"]
