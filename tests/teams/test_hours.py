"""GPU-hours arithmetic of lease intervals (pure)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from teams import hours


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("held_from", "held_until", "start", "end", "expected"),
    [
        ("2026-12-01 10:00", "2026-12-01 12:30", "2026-12-01 00:00", "2026-12-02 00:00", 2.5),
        ("2026-11-30 23:00", None, "2026-12-01 00:00", "2026-12-01 01:00", 1.0),  # month edge
        ("2026-11-01 00:00", "2026-11-02 00:00", "2026-12-01 00:00", "2026-12-02 00:00", 0.0),
        ("2026-12-01 05:00", None, "2026-12-01 00:00", "2026-12-01 04:00", 0.0),  # not yet
    ],
)
def test_overlap_hours(held_from, held_until, start, end, expected) -> None:
    until = at(held_until) if held_until else None
    assert hours.overlap_hours(at(held_from), until, at(start), at(end)) == pytest.approx(expected)


def test_month_bounds_are_utc_calendar_months() -> None:
    assert hours.month_start(at("2026-12-04 13:00")) == at("2026-12-01 00:00")
    assert hours.next_month_start(at("2026-12-31 23:59")) == at("2027-01-01 00:00")


def test_hours_split_by_day() -> None:
    split = hours.hours_by_day(
        at("2026-12-01 22:00"), at("2026-12-03 01:00"), at("2026-12-01 00:00"), at("2026-12-05")
    )
    assert split == {date(2026, 12, 1): 2.0, date(2026, 12, 2): 24.0, date(2026, 12, 3): 1.0}
