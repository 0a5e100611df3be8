"""The simulated backend's persistent state: attached engine processes and scripted events.

A small JSON file in a state directory, so that an engine attached by one process (the
deployment supervisor) is seen by another (the sampler) and survives worker restarts.
Writers serialise on an ``flock``; every write is atomic (temp file + ``os.replace``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger(__name__)

STATE_FILE = "simulated-gpus.json"


@dataclass(frozen=True, slots=True)
class SimEngine:
    """An engine process holding memory on some GPUs: ``memory_bytes_per_gpu`` on each, unless
    ``memory_by_gpu`` gives a GPU its own figure (pipeline stages hold different shares)."""

    pid: int
    gpu_indices: tuple[int, ...]
    memory_bytes_per_gpu: int
    util_pct: float
    name: str
    create_time_s: float | None  # guards against pid reuse
    memory_by_gpu: tuple[tuple[int, int], ...] = ()

    def memory_on(self, index: int) -> int:
        """Bytes this engine holds on GPU ``index`` (0 when it is not on it)."""
        if index not in self.gpu_indices:
            return 0
        return dict(self.memory_by_gpu).get(index, self.memory_bytes_per_gpu)


@dataclass(slots=True)
class SimState:
    engines: dict[int, SimEngine] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)
    throttles: dict[int, tuple[str, ...]] = field(default_factory=dict)


def process_create_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def engine_alive(engine: SimEngine) -> bool:
    try:
        proc = psutil.Process(engine.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        created = float(proc.create_time())
    except psutil.Error:
        return False
    return engine.create_time_s is None or abs(created - engine.create_time_s) < 1.0


class StateStore:
    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / STATE_FILE
        self._lock_path = state_dir / (STATE_FILE + ".lock")
        self._cache_key: tuple[int, int, int] | None = None
        self._cache = SimState()

    def load(self) -> SimState:
        """The current state; re-read only when the file changed (a stat per tick)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._cache_key, self._cache = None, SimState()
            return self._cache
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._cache_key:
            self._cache = _decode(json.loads(self.path.read_text()))
            self._cache_key = key
        return self._cache

    def _read(self) -> SimState:
        try:
            return _decode(json.loads(self.path.read_text()))
        except FileNotFoundError:
            return SimState()

    @contextlib.contextmanager
    def update(self) -> Iterator[SimState]:
        """Read-modify-write under an exclusive lock shared by every process."""
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = self._read()
                yield state
                self._write(state)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, state: SimState) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".simstate-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(_encode(state), f, separators=(",", ":"))
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise
        self._cache_key = None


def _encode(state: SimState) -> dict[str, Any]:
    return {
        "engines": [
            {
                "pid": e.pid,
                "gpus": list(e.gpu_indices),
                "mem": e.memory_bytes_per_gpu,
                "util": e.util_pct,
                "name": e.name,
                "ctime": e.create_time_s,
                **({"memg": [list(pair) for pair in e.memory_by_gpu]} if e.memory_by_gpu else {}),
            }
            for e in state.engines.values()
        ],
        "lost": sorted(state.lost),
        "throttles": {str(i): list(r) for i, r in state.throttles.items()},
    }


def _decode(data: dict[str, Any]) -> SimState:
    engines = {
        int(e["pid"]): SimEngine(
            pid=int(e["pid"]),
            gpu_indices=tuple(int(i) for i in e["gpus"]),
            memory_bytes_per_gpu=int(e["mem"]),
            util_pct=float(e["util"]),
            name=str(e["name"]),
            create_time_s=None if e.get("ctime") is None else float(e["ctime"]),
            memory_by_gpu=tuple((int(i), int(m)) for i, m in e.get("memg", [])),
        )
        for e in data.get("engines", [])
    }
    lost = {int(i) for i in data.get("lost", [])}
    throttles = {int(i): tuple(str(x) for x in r) for i, r in data.get("throttles", {}).items()}
    return SimState(engines=engines, lost=lost, throttles=throttles)
