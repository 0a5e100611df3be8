"""The scaling decision (pure): a policy and the recorded figures in, a replica count out.

Up fast, down slowly, with hysteresis: up when every observation of the last `up_after_s`
breaches a target, by as much as the worst breach asks (at most doubling) or, where the
replicas' capacity is known, as many as the requests in the engines (running and waiting)
fill, whichever is more; down one replica
at a time when the last `down_after_s` were calm — no request waiting, every figure well
under its target, and the load would still fit on one replica fewer. Nothing moves while a
replica is still starting or within a window of the last change, and no scale-up before the
replicas added last have served a whole window (their backlog is not theirs to judge by). Below one replica is
never this controller's call (min 0 is the idle sleep's job).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CALM_FRACTION = 0.6  # down only when figures sit under 60 % of their target: the hysteresis band
FIT_FRACTION = 0.7  # ... and the load fits in 70 % of the capacity of one replica fewer


@dataclass(frozen=True, slots=True)
class Policy:
    min_replicas: int
    max_replicas: int
    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    waiting_per_replica: float | None = None
    kv_usage: float | None = None  # 0..1
    up_after_s: float = 15.0
    down_after_s: float = 60.0
    capacity_per_replica: int | None = None  # concurrent sequences (--max-num-seqs), if known


@dataclass(frozen=True, slots=True)
class Observation:
    at_s: float
    replicas: int  # live replicas (starting ones included)
    serving: int  # replicas answering now
    requests: int  # requests that got their first token in this tick
    ttft_p90_s: float | None
    tpot_p90_s: float | None
    waiting: float  # over all replicas
    running: float
    kv_usage: float  # mean over replicas, 0..1


@dataclass(frozen=True, slots=True)
class Decision:
    current: int
    replicas: int
    reason: str

    @property
    def changed(self) -> bool:
        return self.replicas != self.current


@dataclass(frozen=True, slots=True)
class _Signal:
    label: str
    value: float
    target: float
    unit: str

    def text(self, relation: str) -> str:
        return (
            f"{self.label} {_num(self.value)}{self.unit} {relation} {_num(self.target)}{self.unit}"
        )


def decide(
    policy: Policy, series: Sequence[Observation], *, last_change_s: float | None, now_s: float
) -> Decision:
    """`series`: oldest first, the last one taken now."""
    latest = series[-1]
    current = latest.replicas
    floor, ceiling = max(1, policy.min_replicas), max(1, policy.max_replicas)
    if current < floor:
        return Decision(current, floor, f"under the policy's minimum: {current} → {floor} replicas")
    if current > ceiling:
        return Decision(current, ceiling, f"over the policy's maximum: {current} → {ceiling}")
    if latest.serving < current:
        return Decision(
            current, current, f"holding: {current - latest.serving} replica(s) starting"
        )
    if up := _scale_up(policy, series, last_change_s, now_s, current, ceiling):
        return up
    if down := _scale_down(policy, series, last_change_s, now_s, current, floor):
        return down
    return Decision(current, current, "holding: within the policy's targets")


def _window(
    series: Sequence[Observation], span_s: float, since_s: float | None, now_s: float
) -> list[Observation] | None:
    """The observations of the last `span_s`, or None when they do not cover it yet (the
    series is younger, or the last change is more recent: its effect is not seen yet)."""
    start = now_s - span_s
    if since_s is not None and since_s > start:
        return None
    if not series or series[0].at_s > start + 1e-9:
        return None
    return [o for o in series if o.at_s >= start]


def _scale_up(
    policy: Policy,
    series: Sequence[Observation],
    since_s: float | None,
    now_s: float,
    current: int,
    ceiling: int,
) -> Decision | None:
    window = _window(series, policy.up_after_s, since_s, now_s)
    if not window or current >= ceiling or not all(_breaches(policy, o) for o in window):
        return None
    if any(o.serving < current for o in window):
        return None  # the last replicas added have not served a whole window yet
    latest = window[-1]
    worst = max(_breaches(policy, latest), key=lambda s: s.value / s.target)
    ratio = worst.value / worst.target
    wanted = min(2 * current, max(current + 1, math.ceil(current * ratio)))
    if capacity := policy.capacity_per_replica:
        # What the requests in the engines now (running and queued) need at once: a queue
        # grows while replicas start, so the ratio alone would chase it step by step. At full
        # capacity, not FIT_FRACTION: the queue is a backlog that drains, not the steady load.
        demand = math.ceil((latest.running + latest.waiting) / capacity)
        wanted = max(wanted, demand)
    wanted = min(ceiling, wanted)
    reason = f"{worst.text('over')} for {_num(policy.up_after_s)} s: {current} → {wanted} replicas"
    return Decision(current, wanted, reason)


def _scale_down(
    policy: Policy,
    series: Sequence[Observation],
    since_s: float | None,
    now_s: float,
    current: int,
    floor: int,
) -> Decision | None:
    window = _window(series, policy.down_after_s, since_s, now_s)
    if not window or current <= floor:
        return None
    if not all(_calm(policy, o, current) for o in window):
        return None
    figures = ", ".join(s.text("under") for s in _signals(policy, window[-1])) or "no request timed"
    peak = max(o.running for o in window)
    reason = (
        f"calm for {_num(policy.down_after_s)} s ({figures}; at most {_num(peak)} running, "
        f"none waiting): {current} → {current - 1} replicas"
    )
    return Decision(current, current - 1, reason)


def _signals(policy: Policy, o: Observation) -> list[_Signal]:
    per_replica = o.waiting / max(1, o.serving)
    candidates = [
        ("p90 TTFT", o.ttft_p90_s, policy.ttft_p90_s, " s"),
        ("p90 TPOT", o.tpot_p90_s, policy.tpot_p90_s, " s"),
        ("waiting a replica", per_replica, policy.waiting_per_replica, ""),
        ("KV-cache usage", o.kv_usage, policy.kv_usage, ""),
    ]
    return [
        _Signal(label, value, target, unit)
        for label, value, target, unit in candidates
        if value is not None and target is not None
    ]


def _breaches(policy: Policy, o: Observation) -> list[_Signal]:
    return [s for s in _signals(policy, o) if s.value > s.target]


def _calm(policy: Policy, o: Observation, current: int) -> bool:
    if o.waiting > 0 or any(s.value > s.target * CALM_FRACTION for s in _signals(policy, o)):
        return False
    if policy.kv_usage is not None and o.kv_usage * current / (current - 1) > policy.kv_usage:
        return False
    capacity = policy.capacity_per_replica
    return capacity is None or o.running <= FIT_FRACTION * capacity * (current - 1)


def _num(value: float) -> str:
    return f"{value:.3g}"
