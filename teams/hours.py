"""GPU-hours from lease intervals: pure arithmetic, no Django, no clock (`now` is passed in).

A lease is one GPU held by one replica from its creation until its release (or `now`), so a
GPU that two replicas of a team share counts for each: the same unit as the GPUs-held quota.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

HOUR_S = 3600.0


def month_start(now: datetime) -> datetime:
    """The first instant of `now`'s calendar month, in UTC."""
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month_start(now: datetime) -> datetime:
    start = month_start(now)
    return (start + timedelta(days=32)).replace(day=1)


def overlap_hours(
    held_from: datetime, held_until: datetime | None, start: datetime, end: datetime
) -> float:
    """Hours of [held_from, held_until or end) that fall in [start, end)."""
    until = end if held_until is None else min(held_until, end)
    seconds = (until - max(held_from, start)).total_seconds()
    return max(seconds, 0.0) / HOUR_S


def total_hours(
    intervals: Iterable[tuple[datetime, datetime | None]], start: datetime, end: datetime
) -> float:
    return sum(overlap_hours(a, b, start, end) for a, b in intervals)


def hours_by_day(
    held_from: datetime, held_until: datetime | None, start: datetime, end: datetime
) -> dict[date, float]:
    """The hours of one interval inside [start, end), split by UTC day."""
    out: dict[date, float] = {}
    since = max(held_from, start).astimezone(UTC)
    until = (end if held_until is None else min(held_until, end)).astimezone(UTC)
    while since < until:
        midnight = datetime.combine(since.date() + timedelta(days=1), datetime.min.time(), UTC)
        piece_end = min(midnight, until)
        out[since.date()] = (
            out.get(since.date(), 0.0) + (piece_end - since).total_seconds() / HOUR_S
        )
        since = piece_end
    return out
