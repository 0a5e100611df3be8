"""The scaling decision on recorded series, and windowed p90 from histogram snapshots."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from deployments.autoscale.decide import Decision, Observation, Policy, decide
from deployments.autoscale.quantiles import delta, merged, quantile

SLO = Policy(min_replicas=1, max_replicas=4, ttft_p90_s=3.0, up_after_s=45, down_after_s=60,
             capacity_per_replica=8)  # fmt: skip


def series(
    ttfts: list[float | None], *, replicas: int = 2, every_s: float = 5, **fields: float
) -> list[Observation]:
    base = {"waiting": 0.0, "running": 2.0, "kv_usage": 0.1} | fields
    return [
        Observation(
            at_s=1000 + i * every_s,
            replicas=replicas,
            serving=replicas,
            requests=5,
            ttft_p90_s=t,
            tpot_p90_s=0.02,
            **base,
        )
        for i, t in enumerate(ttfts)
    ]


def run(policy: Policy, obs: list[Observation], last_change_s: float | None = None) -> Decision:
    return decide(policy, obs, last_change_s=last_change_s, now_s=obs[-1].at_s)


def test_a_breach_held_for_the_whole_window_scales_up_with_its_figures() -> None:
    obs = series([1.0] + [3.8] * 10)  # 50 s of 3.8 s after one good tick
    d = run(SLO, obs)
    assert (d.current, d.replicas) == (2, 3)
    assert d.reason == "p90 TTFT 3.8 s over 3 s for 45 s: 2 → 3 replicas"


def test_a_short_spike_does_not_scale() -> None:
    obs = series([1.0] * 6 + [9.0] * 3 + [1.0] + [9.0] * 2)
    assert not run(SLO, obs).changed


def test_a_far_breach_asks_for_more_at_once_but_at_most_double_and_the_maximum() -> None:
    assert run(SLO, series([7.5] * 12)).replicas == 4  # ceil(2 × 2.5) = 5, doubled 4, max 4
    one = series([5.0] * 12, replicas=1)
    assert run(SLO, one).replicas == 2


def test_a_queue_asks_for_the_replicas_it_needs_at_once() -> None:
    queued = series([3.8] * 12, replicas=1, running=8.0, waiting=32.0)
    assert run(SLO, queued).replicas == 4  # ceil(40 / 8) = 5, the maximum 4
    assert run(replace(SLO, max_replicas=16), queued).replicas == 5
    no_capacity = replace(SLO, capacity_per_replica=None, max_replicas=16)
    assert run(no_capacity, queued).replicas == 2  # the ratio alone: at most doubling


def test_no_change_within_a_window_of_the_last_one() -> None:
    obs = series([3.8] * 12)
    assert not run(SLO, obs, last_change_s=obs[-1].at_s - 30).changed
    assert run(SLO, obs, last_change_s=obs[-1].at_s - 50).changed


def test_no_second_step_before_the_added_replicas_served_a_whole_window() -> None:
    obs = series([3.8] * 12, replicas=4)
    started = [Observation(**{**_fields(o), "serving": 1}) for o in obs[:-2]] + obs[-2:]
    roomy = replace(SLO, max_replicas=8)
    assert not run(roomy, started, last_change_s=obs[0].at_s).changed
    assert run(roomy, obs, last_change_s=obs[0].at_s).changed


def test_holds_while_a_replica_starts() -> None:
    obs = series([9.0] * 12)
    starting = [*obs[:-1], Observation(**{**_fields(obs[-1]), "serving": 1})]
    d = run(SLO, starting)
    assert not d.changed and "starting" in d.reason


def test_calm_scales_down_one_at_a_time_only_when_the_load_fits() -> None:
    calm = series([0.05] * 14, replicas=3, running=4.0)
    d = run(SLO, calm)
    assert (d.current, d.replicas) == (3, 2)
    assert d.reason.startswith("calm for 60 s (p90 TTFT 0.05 s under 3 s")
    busy = series([0.05] * 14, replicas=3, running=12.0)  # 12 > 0.7 × 8 × 2
    assert not run(SLO, busy).changed


def test_hysteresis_band_and_waiting_block_scale_down() -> None:
    assert not run(SLO, series([2.0] * 14, replicas=3)).changed  # under 3 s, not under 1.8 s
    assert not run(SLO, series([0.05] * 14, replicas=3, waiting=1.0)).changed


def test_idle_goes_down_to_one_never_zero() -> None:
    zero = Policy(min_replicas=0, max_replicas=4, ttft_p90_s=3.0, down_after_s=60)
    assert run(zero, series([None] * 14, replicas=2, running=0)).replicas == 1
    assert not run(zero, series([None] * 14, replicas=1, running=0)).changed


def test_bounds_are_enforced_first() -> None:
    assert run(Policy(min_replicas=3, max_replicas=4), series([None], replicas=2)).replicas == 3
    assert run(Policy(min_replicas=1, max_replicas=2), series([None], replicas=4)).replicas == 2


@pytest.mark.parametrize(
    ("policy", "fields", "label"),
    [
        (Policy(1, 4, waiting_per_replica=2, up_after_s=10), {"waiting": 10.0}, "waiting a replica 5 over 2"),
        (Policy(1, 4, kv_usage=0.8, up_after_s=10), {"kv_usage": 0.95}, "KV-cache usage 0.95 over 0.8"),
        (Policy(1, 4, tpot_p90_s=0.01, up_after_s=10), {}, "p90 TPOT 0.02 s over 0.01 s"),
    ],
)  # fmt: skip
def test_load_targets(policy: Policy, fields: dict[str, float], label: str) -> None:
    d = run(policy, series([None] * 4, **fields))
    assert d.changed and d.reason.startswith(label)


def test_windowed_p90_from_histogram_deltas() -> None:
    before = {0.1: 10.0, 1.0: 10.0, 5.0: 10.0, math.inf: 10.0}
    now = {0.1: 10.0, 1.0: 15.0, 5.0: 20.0, math.inf: 20.0}
    window = delta(now, before)
    assert window == {0.1: 0.0, 1.0: 5.0, 5.0: 10.0, math.inf: 10.0}
    # rank 9 of 10: the 4th of the 5 in (1, 5]: 1 + 4 × 4/5
    assert quantile(0.9, window) == pytest.approx(4.2)
    assert quantile(0.9, delta(before, before)) is None
    restarted = {0.1: 1.0, 1.0: 1.0, 5.0: 1.0, math.inf: 1.0}
    assert delta(restarted, now) == restarted  # counters went back: the engine restarted
    assert quantile(0.75, merged([window, window])) == pytest.approx(3.0)
    assert quantile(0.99, {1.0: 0.0, math.inf: 3.0}) == 1.0  # past the last bound


def _fields(o: Observation) -> dict[str, object]:
    return {name: getattr(o, name) for name in Observation.__dataclass_fields__}
