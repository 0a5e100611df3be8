"""A deterministic, scriptable GPU backend for machines without NVIDIA GPUs.

Load comes from attached engine processes (``attach``/``detach``), persisted in a state
directory so that every process on the host sees the same engines. Utilisation, power and
clocks follow the load with noise derived from ``(seed, gpu, tick)``; temperature moves
towards its load target with a thermal lag. Scripted events (``lose``, ``throttle``,
``restore``) are persisted too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import combinations
from pathlib import Path

from monitoring.gpus.base import (
    MIB,
    THROTTLE_REASONS,
    DeviceInfo,
    GpuBackendError,
    GpuProcess,
    GpuSample,
    HostSample,
    TopologyLink,
    failed_sample,
)
from monitoring.gpus.simspec import SimGpu, layout, parse_spec, sim_device, sim_link
from monitoring.gpus.simstate import (
    SimEngine,
    SimState,
    StateStore,
    engine_alive,
    process_create_time,
)

log = logging.getLogger(__name__)

BASELINE_MEMORY_BYTES = 512 * MIB  # driver + context on an idle board
IDLE_TEMPERATURE_C = 32.0
LOAD_TEMPERATURE_RISE_C = 40.0
THERMAL_THROTTLE_TEMPERATURE_C = 88.0
THERMAL_LAG = 0.15  # fraction of the gap to the target temperature closed per tick
_MASK64 = (1 << 64) - 1


def noise(seed: int, index: int, tick: int, channel: int) -> float:
    """A reproducible value in [-1, 1) (splitmix64 of the inputs)."""
    z = (
        seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9 + tick * 0x94D049BB133111EB
    ) & _MASK64
    z = (z + channel * 0xD6E8FEB86659FD93) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    z ^= z >> 31
    return (z >> 11) / float(1 << 52) - 1.0


class SimulatedBackend:
    simulated = True

    def __init__(
        self,
        spec: str,
        *,
        state_dir: Path,
        seed: int = 0,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.spec = spec
        self.seed = seed
        self._gpus: tuple[SimGpu, ...] = layout(parse_spec(spec))
        self._devices = tuple(sim_device(g, seed) for g in self._gpus)
        self._store = StateStore(state_dir)
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._tick = 0
        self._temperature_c = [
            IDLE_TEMPERATURE_C + 2 * noise(seed, g.index, -1, 9) for g in self._gpus
        ]

    def devices(self) -> tuple[DeviceInfo, ...]:
        return self._devices

    def topology(self) -> tuple[TopologyLink, ...]:
        return tuple(sim_link(a, b) for a, b in combinations(self._gpus, 2))

    def close(self) -> None:
        """Nothing to release: the state file is the persistent part."""

    # --- scripted load and events -------------------------------------------------------

    def attach(
        self,
        pid: int,
        gpu_indices: Sequence[int],
        memory_bytes_per_gpu: int,
        util_pct: float = 80.0,
        *,
        name: str = "",
        memory_by_gpu: Mapping[int, int] | None = None,
    ) -> None:
        """Register a simulated engine process holding memory (and load) on some GPUs.

        Several engines may share a GPU: its memory used is the sum of their shares (plus the
        idle board's), and an engine that would not fit beside the others is refused, as CUDA
        would refuse its allocation. ``memory_by_gpu`` gives some GPUs their own share."""
        indices = self._check_indices(gpu_indices)
        own = dict(memory_by_gpu or {})
        if set(own) - set(indices):
            raise GpuBackendError(f"memory_by_gpu names GPUs {sorted(own)} not in {list(indices)}")
        if min([memory_bytes_per_gpu, *own.values()]) < 0 or not 0.0 <= util_pct <= 100.0:
            raise GpuBackendError("memory must be >= 0 bytes and util_pct in 0..100")
        engine = SimEngine(
            pid=pid,
            gpu_indices=indices,
            memory_bytes_per_gpu=memory_bytes_per_gpu,
            util_pct=util_pct,
            name=name or f"pid-{pid}",
            create_time_s=process_create_time(pid),
            memory_by_gpu=tuple(sorted(own.items())),
        )
        with self._store.update() as state:
            state.engines.pop(pid, None)
            self._check_fits(state, engine)
            state.engines[pid] = engine

    def detach(self, pid: int) -> None:
        with self._store.update() as state:
            state.engines.pop(pid, None)

    def lose(self, index: int) -> None:
        self._check_indices([index])
        with self._store.update() as state:
            state.lost.add(index)

    def throttle(self, index: int, reason: str) -> None:
        self._check_indices([index])
        if reason not in THROTTLE_REASONS:
            raise GpuBackendError(f"unknown throttle reason {reason!r}: {sorted(THROTTLE_REASONS)}")
        with self._store.update() as state:
            reasons = state.throttles.get(index, ())
            state.throttles[index] = (*reasons, reason) if reason not in reasons else reasons

    def restore(self, index: int) -> None:
        self._check_indices([index])
        with self._store.update() as state:
            state.lost.discard(index)
            state.throttles.pop(index, None)

    def engines(self) -> tuple[SimEngine, ...]:
        return tuple(self._store.load().engines.values())

    def _check_indices(self, indices: Iterable[int]) -> tuple[int, ...]:
        checked = tuple(indices)
        bad = [i for i in checked if not 0 <= i < len(self._gpus)]
        if bad or not checked:
            raise GpuBackendError(f"GPU indices {list(checked)} not in 0..{len(self._gpus) - 1}")
        return checked

    def _check_fits(self, state: SimState, engine: SimEngine) -> None:
        for i in engine.gpu_indices:
            used = _attached_bytes(state.engines.values(), i) + BASELINE_MEMORY_BYTES
            total = self._devices[i].memory_total_bytes
            asked = engine.memory_on(i)
            if used + asked > total:
                free_mib = (total - used) // MIB
                raise GpuBackendError(
                    f"GPU {i} out of memory: {asked // MIB} MiB asked, {free_mib} MiB free"
                )

    # --- sampling -----------------------------------------------------------------------

    def sample(self) -> HostSample:
        ts_ms = self._clock_ms()
        try:
            state = self._live_state()
        except (OSError, ValueError, KeyError) as exc:
            log.exception("simulated GPU state unreadable in %s", self._store.path)
            error = f"simulated state unreadable: {exc}"
            gpus = tuple(
                failed_sample(d.index, d.uuid, lost=False, error=error) for d in self._devices
            )
            return HostSample(ts_ms=ts_ms, gpus=gpus)
        tick, self._tick = self._tick, self._tick + 1
        return HostSample(
            ts_ms=ts_ms, gpus=tuple(self._sample_gpu(g, state, tick) for g in self._gpus)
        )

    def _live_state(self) -> SimState:
        state = self._store.load()
        dead = [pid for pid, e in state.engines.items() if not engine_alive(e)]
        if dead:
            log.info("simulated GPUs: dropping engines whose processes are gone: %s", dead)
            with self._store.update() as fresh:
                for pid in dead:
                    fresh.engines.pop(pid, None)
            state = self._store.load()
        return state

    def _sample_gpu(self, gpu: SimGpu, state: SimState, tick: int) -> GpuSample:
        device = self._devices[gpu.index]
        if gpu.index in state.lost:
            return failed_sample(gpu.index, device.uuid, lost=True, error="GPU is lost")
        engines = [e for e in state.engines.values() if gpu.index in e.gpu_indices]
        reasons = state.throttles.get(gpu.index, ())
        load = min(1.0, sum(e.util_pct for e in engines) / 100.0)
        util = 0.0 if load == 0 else _clamp(100 * load + 3 * self._noise(gpu, tick, 1), 1, 100)
        temp = self._step_temperature(gpu, load, reasons, tick)
        used = min(
            BASELINE_MEMORY_BYTES + _attached_bytes(engines, gpu.index), device.memory_total_bytes
        )
        model = gpu.model
        return GpuSample(
            index=gpu.index,
            uuid=device.uuid,
            gpu_util_pct=round(util),
            mem_util_pct=round(util * 0.55),
            memory_used_bytes=used,
            memory_free_bytes=device.memory_total_bytes - used,
            memory_total_bytes=device.memory_total_bytes,
            temperature_c=round(temp),
            power_mw=self._power_mw(gpu, load, bool(reasons), tick),
            power_limit_mw=model.power_limit_w * 1000,
            sm_clock_mhz=_sm_clock_mhz(gpu, load, bool(reasons)),
            fan_pct=round(_clamp(30 + 1.2 * (temp - IDLE_TEMPERATURE_C), 30, 100))
            if model.has_fan
            else None,
            throttle_reasons=(("gpu_idle",) if load == 0 else ()) + reasons,
            ecc_uncorrected=0 if model.has_ecc else None,
            processes=tuple(GpuProcess(e.pid, e.memory_on(gpu.index), e.name) for e in engines),
            lost=False,
            error=None,
        )

    def _noise(self, gpu: SimGpu, tick: int, channel: int) -> float:
        return noise(self.seed, gpu.index, tick, channel)

    def _step_temperature(
        self, gpu: SimGpu, load: float, reasons: tuple[str, ...], tick: int
    ) -> float:
        """Move towards the load's temperature (or a throttling one) with a thermal lag."""
        target_c = IDLE_TEMPERATURE_C + LOAD_TEMPERATURE_RISE_C * load
        if any("thermal" in r for r in reasons):
            target_c = max(target_c, THERMAL_THROTTLE_TEMPERATURE_C)
        temp = self._temperature_c[gpu.index]
        temp += THERMAL_LAG * (target_c - temp) + 0.3 * self._noise(gpu, tick, 2)
        self._temperature_c[gpu.index] = temp
        return temp

    def _power_mw(self, gpu: SimGpu, load: float, slowed: bool, tick: int) -> int:
        model = gpu.model
        power_w = model.idle_power_w + (model.power_limit_w - model.idle_power_w) * load * 0.92
        power_w *= 0.7 if slowed else 1.0
        return int(_clamp(power_w + 2 * self._noise(gpu, tick, 3), 1, model.power_limit_w) * 1000)


def _sm_clock_mhz(gpu: SimGpu, load: float, slowed: bool) -> int:
    model = gpu.model
    fraction = (0.2 + 0.8 * min(1.0, load * 4)) * (0.6 if slowed else 1.0)
    return int(
        model.idle_sm_clock_mhz + (model.max_sm_clock_mhz - model.idle_sm_clock_mhz) * fraction
    )


def _attached_bytes(engines: Iterable[SimEngine], index: int) -> int:
    return sum(e.memory_on(index) for e in engines)


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))
