"""The steps of a start as the pages show them: state, progress, the time each took, and the
median time of earlier starts of the same model and engine as the one to expect."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deployments.lifecycle.launchphases import launch_steps, progress_texts
from deployments.models import Deployment, LaunchPhase
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _deployment(name: str, user: Any, status: str, model: str = "sbtest/tiny-llama") -> Deployment:
    host = sim_host(f"h-{name}", 1)
    return Deployment.objects.create(
        name=name, model_id=model, engine="transformers", host=host, status=status, created_by=user
    )


def _start(d: Deployment, seconds: dict[str, float], *, open_last: bool = False) -> None:
    at = T0
    items = list(seconds.items())
    for i, (phase, s) in enumerate(items):
        end = None if open_last and i == len(items) - 1 else at + timedelta(seconds=s)
        LaunchPhase.objects.create(deployment=d, phase=phase, started_at=at, ended_at=end)
        at += timedelta(seconds=s)


def test_expected_times_are_medians_of_earlier_starts(operator: Any) -> None:
    for i, load_s in enumerate((4.0, 6.0, 20.0)):
        _start(
            _deployment(f"old{i}", operator, "stopped"),
            {"loading": load_s, "warming_up": 1.0, "ready": 0.0},
        )
    _deployment("other-model", operator, "stopped", model="sbtest/other")
    d = _deployment("now", operator, "starting")
    LaunchPhase.objects.create(deployment=d, phase="loading", started_at=T0, done=1, total=4)
    steps = launch_steps(d)
    rows = {r.phase: r for r in steps.rows}
    assert rows["loading"].expected_s == 6.0 and rows["warming_up"].expected_s == 1.0
    assert steps.expected_total_s == 7.0
    assert rows["loading"].state == "current" and rows["loading"].text == "1 of 4 shards"
    assert rows["loading"].percent == 25
    assert rows["profiling"].state == "waiting" and steps.live
    assert progress_texts([d.pk]) == {d.pk: "Loading weights 25%"}


def test_a_start_that_ended_mid_step_says_so(operator: Any) -> None:
    d = _deployment("died", operator, "failed")
    _start(d, {"loading": 3.0, "warming_up": 2.0}, open_last=True)
    rows = {r.phase: r for r in launch_steps(d).rows}
    assert rows["loading"].state == "done" and rows["loading"].duration_s == 3.0
    assert rows["warming_up"].state == "cut"
    assert progress_texts([d.pk]) == {}  # no longer starting: no progress in the list
