from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from monitoring.gpus import HostSample
from monitoring.gpus.simulated import SimulatedBackend
from monitoring.host.sampler import Sampler, fan_out, next_tick


class FakeTime:
    """The sampler's clock and wait seams: time only moves when someone spends it."""

    def __init__(self, stop_after_ticks: int) -> None:
        self.now_s = 100.0
        self.calls_at: list[float] = []
        self.stop_after = stop_after_ticks

    def clock(self) -> float:
        return self.now_s

    def wait(self, seconds: float) -> bool:
        assert seconds >= 0
        self.now_s += seconds
        return len(self.calls_at) >= self.stop_after


def _sampler(
    backend: SimulatedBackend, fake: FakeTime, costs_s: dict[int, float], interval_s: float = 1.0
) -> Sampler:
    def sink(sample: HostSample) -> None:
        tick = len(fake.calls_at)
        fake.calls_at.append(fake.now_s)
        fake.now_s += costs_s.get(tick, 0.05)
        if tick == 2:
            raise RuntimeError("sink broke")

    return Sampler(backend, sink, interval_s=interval_s, clock=fake.clock, wait=fake.wait)


def test_schedule_does_not_drift(sim4: SimulatedBackend) -> None:
    fake = FakeTime(stop_after_ticks=6)
    _sampler(sim4, fake, {0: 0.3, 1: 0.9, 3: 0.45}, interval_s=0.5).run()
    assert [round(t - 100.0, 6) for t in fake.calls_at] == [0.0, 0.5, 1.5, 2.0, 2.5, 3.0]


def test_missed_ticks_are_skipped_not_burst(sim4: SimulatedBackend) -> None:
    fake = FakeTime(stop_after_ticks=4)
    sampler = _sampler(sim4, fake, {1: 2.5})
    sampler.run()
    assert [round(t - 100.0, 6) for t in fake.calls_at] == [0.0, 1.0, 4.0, 5.0]
    assert sampler.skipped_ticks == 2


def test_sink_errors_are_logged_and_the_loop_goes_on(
    sim4: SimulatedBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="monitoring.host.sampler")
    fake = FakeTime(stop_after_ticks=5)
    sampler = _sampler(sim4, fake, {})
    sampler.run()
    assert len(fake.calls_at) == 5 and sampler.failures == 1
    assert "sink broke" in caplog.text and "recovered" in caplog.text


def test_backend_errors_are_survived(sim4: SimulatedBackend, tmp_path: Path) -> None:
    fake = FakeTime(stop_after_ticks=3)
    calls: list[int] = []

    class Flaky(SimulatedBackend):
        def sample(self) -> HostSample:
            calls.append(1)
            if len(calls) == 1:
                raise OSError("driver hiccup")
            fake.calls_at.append(fake.now_s)
            return super().sample()

    flaky = Flaky("1xL4", state_dir=tmp_path)
    sampler = Sampler(flaky, lambda s: None, clock=fake.clock, wait=fake.wait)
    sampler.run()
    assert len(calls) == 4 and sampler.failures == 1


@pytest.mark.parametrize("interval_s", [0.1, 61.0, 0.0])
def test_interval_bounds(sim4: SimulatedBackend, interval_s: float) -> None:
    with pytest.raises(ValueError, match=r"not in 0\.2\.\.60"):
        Sampler(sim4, lambda s: None, interval_s=interval_s)


def test_next_tick() -> None:
    assert next_tick(0.0, 0.2, 1.0, 0) == 1
    assert next_tick(0.0, 3.7, 1.0, 1) == 4
    assert next_tick(0.0, 1.0, 1.0, 0) == 2  # exactly on a deadline that is now: next one


def test_thread_runs_on_the_real_clock_and_stops(sim4: SimulatedBackend) -> None:
    got: list[HostSample] = []
    first = threading.Event()
    sampler = Sampler(sim4, lambda s: (got.append(s), first.set()), interval_s=0.2)
    sampler.start()
    assert first.wait(2)
    time.sleep(0.5)
    sampler.stop()
    count = len(got)
    assert 2 <= count <= 6  # ~0.5-0.7 s at 0.2 s on a loaded machine
    time.sleep(0.3)
    assert len(got) == count


def test_fan_out_feeds_every_sink_and_reports_the_failure(sim4: SimulatedBackend) -> None:
    got: list[str] = []

    def broken(sample: HostSample) -> None:
        raise ConnectionError("redis down")

    sink = fan_out(broken, lambda s: got.append("channel"), broken)
    with pytest.raises(ConnectionError, match="redis down"):
        sink(sim4.sample())
    assert got == ["channel"]
