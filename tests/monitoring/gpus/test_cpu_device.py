"""The host's CPU and RAM as a device: its facts, a real sample, and the processes of the
engines' process groups with their RSS (what attributes RAM to deployments)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from monitoring.gpus.cpu import CPU_INDEX, CpuDevice, WithCpu, engine_processes, read_facts
from monitoring.gpus.simulated import SimulatedBackend
from tests.support.waiting import wait_for


def test_facts_are_this_machines() -> None:
    facts = read_facts()
    assert facts.cores == len(os.sched_getaffinity(0)) and facts.core_ids
    assert facts.total_bytes == psutil.virtual_memory().total and facts.numa_nodes >= 1
    assert set(facts.isa) <= {f for line in Path("/proc/cpuinfo").read_text().splitlines()
                              if line.startswith("flags") for f in line.split()}  # fmt: skip


def test_an_engines_process_group_is_listed_with_its_rss() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; x = bytearray(64 << 20); time.sleep(60)"],
        start_new_session=True,
    )
    try:
        device = CpuDevice("h", lambda: {child.pid})
        procs = wait_for(
            lambda: [p for p in device.sample().processes if (p.used_memory_bytes or 0) > 64 << 20]
        )
        assert [p.pid for p in procs] == [child.pid]
        sample = device.sample()
        assert (
            sample.index == CPU_INDEX and sample.memory_total_bytes == psutil.virtual_memory().total
        )
        assert 0 < (sample.memory_free_bytes or 0) < (sample.memory_total_bytes or 0)
        assert sample.gpu_util_pct is not None and 0 <= sample.gpu_util_pct <= 100
    finally:
        child.kill()
        child.wait()
    assert engine_processes({child.pid}) == ()
    assert engine_processes(set()) == ()


def test_with_cpu_adds_the_cpu_to_a_gpu_backend(tmp_path: Path) -> None:
    gpus = SimulatedBackend("2xH100", state_dir=tmp_path)
    both = WithCpu(gpus, CpuDevice("h", frozenset))
    assert [(d.index, d.kind) for d in both.devices()] == [
        (0, "gpu"),
        (1, "gpu"),
        (CPU_INDEX, "cpu"),
    ]
    assert both.topology() == gpus.topology() and both.simulated
    assert [g.index for g in both.sample().gpus] == [0, 1, CPU_INDEX]
