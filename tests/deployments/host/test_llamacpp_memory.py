"""llama-server's per-device buffer lines (-lv 4) read into bytes and set beside the plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.engines.llamacpp_memory import (
    HOST,
    MIB,
    DeviceBuffers,
    by_gpu,
    compare,
    device_of,
    read_buffers,
    visible_order,
)
from tests.support.llama_shapes import kv_bytes

RECORDED = Path(__file__).parent / "startup_logs" / "llamacpp_b11434_cpu.log"
HALF_LOGGED_UNIT = round(0.005 * MIB)  # the lines carry MiB to two decimals

# The §3.3 lines of reference llamacpp.md for a two-GPU layer split, values filled in.
TWO_GPUS = """\
load_tensors: offloaded 33/33 layers to GPU
load_tensors:        CUDA0 model buffer size =  2201.75 MiB
load_tensors:        CUDA1 model buffer size =  2150.50 MiB
load_tensors:   CPU_Mapped model buffer size =   281.81 MiB
llama_context:  CUDA_Host  output buffer size =     0.98 MiB
llama_kv_cache:      CUDA0 KV buffer size =   272.00 MiB
llama_kv_cache:      CUDA1 KV buffer size =   240.00 MiB
sched_reserve:       CUDA0 compute buffer size =   296.00 MiB
sched_reserve:       CUDA1 compute buffer size =   304.00 MiB
sched_reserve:   CUDA_Host compute buffer size =    16.01 MiB
"""


def mib(value: float) -> int:
    return round(value * MIB)


def test_recorded_cpu_start_kv_matches_the_formula() -> None:
    (host,) = read_buffers(RECORDED.read_text())
    assert host.device == HOST
    assert host.model_bytes == mib(0.41)
    assert host.compute_bytes == mib(1.64)
    assert abs(host.kv_bytes - kv_bytes(512)) <= HALF_LOGGED_UNIT  # -c 512, f16


def test_two_gpus_by_leased_index() -> None:
    buffers = read_buffers(TWO_GPUS)
    assert [b.device for b in buffers] == ["CUDA0", "CUDA1", HOST]
    gpus = by_gpu(buffers, (2, 3))
    assert gpus[2] == DeviceBuffers("CUDA0", mib(2201.75), mib(272), mib(296))
    assert gpus[3].total_bytes == mib(2150.50) + mib(240) + mib(304)
    host = buffers[2]
    assert (host.model_bytes, host.output_bytes, host.compute_bytes) == (
        mib(281.81),
        mib(0.98),
        mib(16.01),
    )


def test_a_restart_in_the_same_log_counts_once() -> None:
    twice = read_buffers(TWO_GPUS + "srv  llama_server: exiting\n" + TWO_GPUS)
    assert twice == read_buffers(TWO_GPUS)


@pytest.mark.parametrize(
    ("name", "device"),
    [
        ("CUDA0", "CUDA0"),
        ("CUDA1_Mapped", "CUDA1"),
        ("CPU_Mapped", HOST),
        ("CPU_REPACK", HOST),
        ("CUDA_Host", HOST),
        ("Vulkan0", "Vulkan0"),
    ],
)
def test_device_of(name: str, device: str) -> None:
    assert device_of(name) == device


def test_compare_rows_planned_beside_measured() -> None:
    planned = {2: (mib(2200), mib(272), mib(2800)), 3: (mib(2150), mib(240), mib(2700))}
    rows = compare(planned, read_buffers(TWO_GPUS), (2, 3))
    assert [r.gpu for r in rows] == [2, 3]
    assert rows[0].difference_bytes == mib(2201.75) + mib(272) + mib(296) - mib(2800)
    assert compare(planned, (), (2, 3))[1].difference_bytes is None


@pytest.mark.parametrize(
    ("planned", "leased", "order"),
    [
        ((3, 1), (1, 3), (3, 1)),  # the plan's order: its -ts shares follow it
        ((0, 1), (3, 1), (1, 3)),  # leased others: by index
        ((), (2, 0), (0, 2)),
    ],
)
def test_visible_order(
    planned: tuple[int, ...], leased: tuple[int, ...], order: tuple[int, ...]
) -> None:
    assert visible_order(planned, leased) == order
