"""A drift-free sampling loop: tick k runs at ``start + k * interval_s``.

When a tick runs late (slow backend or sink, a paused process) the missed deadlines are
skipped rather than replayed in a burst. The loop never dies of an exception raised by the
backend or the sink: it logs it and keeps its schedule.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from monitoring.gpus.base import GpuBackend, HostSample

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 1.0
MIN_INTERVAL_S = 0.2
MAX_INTERVAL_S = 60.0
_REPEAT_LOG_EVERY = 60  # consecutive failures between two full reports

Sink = Callable[[HostSample], None]


def check_interval_s(interval_s: float) -> float:
    if not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:
        raise ValueError(
            f"sampling interval {interval_s} s not in {MIN_INTERVAL_S}..{MAX_INTERVAL_S} s"
        )
    return float(interval_s)


def next_tick(start_s: float, now_s: float, interval_s: float, last_tick: int) -> int:
    """The first tick after ``last_tick`` whose deadline has not passed yet."""
    due = math.floor((now_s - start_s) / interval_s) + 1
    return max(last_tick + 1, due)


def fan_out(*sinks: Sink) -> Sink:
    """One sink feeding several (history, live streams): a failing one does not starve the
    others; the first failure is re-raised afterwards so the loop logs and counts it."""

    def sink(sample: HostSample) -> None:
        errors: list[Exception] = []
        for each in sinks:
            try:
                each(sample)
            except Exception as exc:
                errors.append(exc)
        if len(errors) > 1:
            log.error("%d sinks failed this tick; others: %s", len(errors), errors[1:])
        if errors:
            raise errors[0]

    return sink


class Sampler:
    def __init__(
        self,
        backend: GpuBackend,
        sink: Sink,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
        name: str = "gpu-sampler",
    ) -> None:
        """``clock`` and ``wait`` (sleep up to s seconds, True when stopped) are the seams."""
        self.backend = backend
        self.sink = sink
        self.interval_s = check_interval_s(interval_s)
        self._clock = clock
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._name = name
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self.skipped_ticks = 0
        self.failures = 0
        self._consecutive_failures = 0

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("%s did not stop within %.1f s", self._name, timeout_s)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        """The loop itself (blocking); ``start`` runs it in a daemon thread."""
        start_s = self._clock()
        tick = 0
        while not self._stop.is_set():
            self._tick_once()
            now_s = self._clock()
            following = next_tick(start_s, now_s, self.interval_s, tick)
            self.skipped_ticks += following - tick - 1
            tick = following
            delay_s = start_s + tick * self.interval_s - now_s
            if self._wait(max(0.0, delay_s)):
                break

    def _tick_once(self) -> None:
        self.ticks += 1
        try:
            self.sink(self.backend.sample())
        except Exception:
            self.failures += 1
            self._consecutive_failures += 1
            if self._consecutive_failures % _REPEAT_LOG_EVERY == 1:
                log.exception(
                    "%s: tick failed (%d in a row); the loop continues",
                    self._name,
                    self._consecutive_failures,
                )
        else:
            if self._consecutive_failures:
                log.info(
                    "%s: recovered after %d failed ticks", self._name, self._consecutive_failures
                )
            self._consecutive_failures = 0
