"""Windowed quantiles from Prometheus histogram snapshots (pure).

A histogram's buckets are cumulative since the engine started, so the requests of a window
are the difference of two snapshots; the quantile interpolates inside its bucket as
Prometheus's histogram_quantile does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Buckets = Mapping[float, float]  # upper bound (math.inf included) -> cumulative count


def delta(now: Buckets, before: Buckets | None) -> dict[float, float]:
    """The window's cumulative counts; a counter that went back (engine restarted) counts
    from zero."""
    if before is None or any(now.get(b, 0.0) < c for b, c in before.items()):
        return dict(now)
    return {bound: count - before.get(bound, 0.0) for bound, count in now.items()}


def merged(windows: Sequence[Buckets]) -> dict[float, float]:
    out: dict[float, float] = {}
    for window in windows:
        for bound, count in window.items():
            out[bound] = out.get(bound, 0.0) + count
    return out


def quantile(q: float, buckets: Buckets) -> float | None:
    """The q-quantile of the observations counted in `buckets`; None when there are none."""
    bounds = sorted(buckets)
    total = buckets.get(math.inf, buckets[bounds[-1]] if bounds else 0.0)
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower  # beyond the last finite bound: its value is all we know
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower
