from __future__ import annotations

import json
import subprocess
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitoring.gpus.simulated import SimulatedBackend
from monitoring.payloads import backfill_message, live_message, table_rows
from monitoring.prom import GpuCollector, HostSnapshot, gpu_metric_families

GIB = 1024**3


def _busy_backend(tmp_path: Path, pid: int) -> SimulatedBackend:
    backend = SimulatedBackend("2xH100-80GB@nvlink,1xRTX4090", state_dir=tmp_path, seed=1)
    backend.attach(pid, [0], 20 * GIB, 90.0, name="vllm")
    backend.lose(1)
    return backend


def test_live_message_is_compact_and_rounded(
    tmp_path: Path, engine_process: subprocess.Popen[bytes]
) -> None:
    backend = _busy_backend(tmp_path, engine_process.pid)
    message = live_message("gpu-a", backend.sample(), simulated=True)
    g0, g1, g2 = message["g"]
    assert message["type"] == "sample" and message["h"] == "gpu-a" and message["sim"] is True
    assert g0["i"] == 0 and g0["m"] == 20 * 1024 + 512 and g0["mt"] == 81559
    assert g0["pr"] == [[engine_process.pid, 20 * 1024, "vllm"]]
    assert isinstance(g0["p"], float) and round(g0["p"], 1) == g0["p"] and g0["pl"] == 700.0
    assert "f" not in g0 and "f" in g2  # no fan on an SXM board: left out, not null
    assert g1 == {"i": 1, "err": "GPU is lost", "lost": 1}
    assert len(json.dumps(message, separators=(",", ":"))) < 600


def test_backfill_message_wraps_a_series() -> None:
    series = {"res_s": 1.0, "t": [1, 2], "g": {"0": {"u": [3, 4]}}}
    message = backfill_message("h", "5m", series, simulated=False)
    assert message == {"type": "backfill", "h": "h", "sim": False, "w": "5m", **series}


def test_table_rows_look_like_nvidia_smi(
    tmp_path: Path, engine_process: subprocess.Popen[bytes]
) -> None:
    backend = _busy_backend(tmp_path, engine_process.pid)
    rows = table_rows(backend.devices(), backend.sample(), simulated=True)
    assert [r.state for r in rows] == ["ok", "lost", "ok"]
    assert rows[0].memory == "20992MiB / 81559MiB"
    assert rows[0].fan == "N/A" and rows[0].power.endswith(" / 700W") and rows[0].processes == "1"
    assert rows[1].memory == "N/A / 81559MiB" and rows[1].gpu_util == "N/A"
    assert rows[2].name == "NVIDIA GeForce RTX 4090" and rows[2].fan.endswith("%")
    assert table_rows(backend.devices(), None, simulated=True)[0].state == "error"


def test_prometheus_families_use_dcgm_names_and_labels(
    tmp_path: Path, engine_process: subprocess.Popen[bytes]
) -> None:
    backend = _busy_backend(tmp_path, engine_process.pid)
    snapshot = HostSnapshot("gpu-a", True, backend.devices(), backend.sample())
    registry = CollectorRegistry()
    registry.register(GpuCollector(lambda: [snapshot]))
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}

    used = {s.labels["gpu"]: s for s in families["DCGM_FI_DEV_FB_USED"].samples}
    assert set(used) == {"0", "2"}  # the lost GPU has no memory figure
    assert used["0"].value == 20 * 1024 + 512
    assert used["0"].labels == {
        "Hostname": "gpu-a",
        "gpu": "0",
        "UUID": backend.devices()[0].uuid,
        "modelName": "NVIDIA H100 80GB HBM3",
        "simulated": "true",
    }
    power = families["DCGM_FI_DEV_POWER_USAGE"].samples[0].value
    assert 100 < power <= 700
    up = {s.labels["gpu"]: s.value for s in families["shardboard_gpu_up"].samples}
    assert up == {"0": 1.0, "1": 0.0, "2": 1.0}
    assert "DCGM_FI_DEV_FAN_SPEED" in families and "DCGM_FI_DEV_SM_CLOCK" in families


def test_no_hosts_no_samples() -> None:
    assert all(not f.samples for f in gpu_metric_families([]))
