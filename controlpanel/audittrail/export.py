"""Exports of the audit trail for a time range, as CSV or JSON Lines, streamed: rows are read
in pages by id (keyset) off the event loop, so a year of rows costs one page of memory. Each
row carries its position and hashes, so the export can be re-checked outside Shardboard.

The CSV is for spreadsheets: a text cell that begins with = + - @ tab or carriage return (a
username such as `-2+3`, a target named by a user) is written behind an apostrophe, so that no
spreadsheet runs it as a formula (OWASP's CSV injection advice). JSON Lines is the exact copy:
re-check hashes from it, or drop that apostrophe first."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.http import QueryDict

from controlpanel.auditchain.canonical import canonical_json
from controlpanel.auditchain.records import FIELDS, record_of
from controlpanel.models import AuditEvent
from controlpanel.selectors import audit_page

PAGE_ROWS = 2000
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}


class BadRange(ValueError):
    """A time range the export cannot use; the message says why."""


@dataclass(frozen=True, slots=True)
class TimeRange:
    since: datetime | None = None  # inclusive
    until: datetime | None = None  # exclusive

    @classmethod
    def from_query(cls, query: QueryDict) -> TimeRange:
        """`from` and `to`: an ISO date (a whole day; `to` includes it) or date and time
        (UTC unless an offset is given); either may be left out."""
        since = _moment(query.get("from", ""), "from", end_of_day=False)
        until = _moment(query.get("to", ""), "to", end_of_day=True)
        if since and until and since >= until:
            raise BadRange("'from' must be before 'to'.")
        return cls(since, until)

    def slug(self) -> str:
        return "-".join(f"{m:%Y%m%dT%H%M}" if m else "all" for m in (self.since, self.until))


def _moment(text: str, name: str, *, end_of_day: bool) -> datetime | None:
    text = text.strip()
    if not text:
        return None
    try:
        if len(text) == 10:
            day = datetime.combine(datetime.fromisoformat(text).date(), time(), tzinfo=UTC)
            return day + timedelta(days=1) if end_of_day else day
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadRange(
            f"'{name}' is not a date (2026-12-04) or a date and time (2026-12-04T13:00)."
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


async def export_lines(fmt: str, span: TimeRange) -> AsyncIterator[str]:
    """The export, a page of rows per chunk."""
    if fmt == "csv":
        yield _csv_line(list(FIELDS))
    after = 0
    while page := await sync_to_async(_page)(span, after):
        yield "".join(_line(fmt, record_of(row)) for row in page)
        after = page[-1].pk


def _page(span: TimeRange, after: int) -> list[AuditEvent]:
    return audit_page(since=span.since, until=span.until, after_id=after, limit=PAGE_ROWS)


def _line(fmt: str, record: dict[str, Any]) -> str:
    if fmt == "jsonl":
        return canonical_json(record) + "\n"
    record["detail"] = canonical_json(record["detail"])
    return _csv_line([record[name] for name in FIELDS])


def _csv_line(values: list[Any]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerow([_cell(v) for v in values])
    return buffer.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
