"""Walking the chain: every row's hash recomputed, every link, position and MAC (the chain's
key, `auditchain.keyed`) checked, the first break named. Rows are read in pages by position
(keyset), so memory stays flat however long the trail is."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from controlpanel.auditchain.canonical import GENESIS, hash_of
from controlpanel.auditchain.keyed import mac_ok
from controlpanel.auditchain.records import FIELDS
from controlpanel.models import AuditEvent

PAGE_ROWS = 5000


@dataclass(frozen=True, slots=True)
class Break:
    """Where the chain first fails: the row to look at and what is wrong with it."""

    row_id: int | None
    kind: str  # changed | deleted | out_of_order | unchained | forged | unkeyed
    message: str


@dataclass(frozen=True, slots=True)
class Verification:
    rows_checked: int
    head_seq: int  # the last position verified good
    head_hash: str
    broken: Break | None = None
    keyed_from: int | None = None  # the first position walked that carries a MAC
    hash_only: int = 0  # rows walked from before the chain was keyed (no MAC)

    @property
    def ok(self) -> bool:
        return self.broken is None


def verify_chain(
    *, after: tuple[int, str] | None = None, known_head_seq: int = 0, page_rows: int = PAGE_ROWS
) -> Verification:
    """Verify the chain from its first row, or from `after` = (position, hash) of a row an
    earlier verification found good (that row is re-read and re-hashed first). A chain that
    now ends before `known_head_seq` lost its tail."""
    state = _Walk(seq=0, hash=GENESIS, row_id=0)
    if after is not None and after[0] > 0:
        broken = state.resume(*after)
        if broken is not None:
            return Verification(0, 0, GENESIS, broken)
    broken = None
    for row in _rows_after(state.seq, page_rows):
        broken = state.step(row)
        if broken is not None:
            break
    if broken is None and known_head_seq > state.seq:
        broken = Break(
            None,
            "deleted",
            f"The chain ends at position {state.seq}, but it was verified up to position "
            f"{known_head_seq}: the rows after position {state.seq} were deleted.",
        )
    if broken is None:
        broken = _first_unchained()
    return Verification(
        state.checked, state.seq, state.hash, broken, state.keyed_from, state.hash_only
    )


@dataclass(slots=True)
class _Walk:
    seq: int
    hash: str
    row_id: int
    checked: int = 0
    keyed_from: int | None = None
    hash_only: int = 0

    def resume(self, seq: int, digest: str) -> Break | None:
        row = AuditEvent.objects.filter(seq=seq).values_list(*FIELDS, named=True).first()
        if row is None:
            return Break(None, "deleted", f"The row at position {seq}, verified before, is gone.")
        if hash_of(row) != row.row_hash or row.row_hash != digest:
            return Break(row.id, "changed", _changed(row))
        if (broken := self._keyed(row)) is not None:
            return broken
        self.seq, self.hash, self.row_id = seq, digest, row.id
        return None

    def step(self, row: Any) -> Break | None:
        row_id, seq, prev_hash, stored = row.id, row.seq, row.prev_hash, row.row_hash
        self.checked += 1
        if hash_of(row) != stored:
            return Break(row_id, "changed", _changed(row))
        if seq != self.seq + 1:
            return Break(
                row_id,
                "deleted",
                f"Row {row_id} is at position {seq}, but the row before it is at position "
                f"{self.seq}: the rows at positions {self.seq + 1}–{seq - 1} were deleted.",
            )
        if prev_hash != self.hash or row_id <= self.row_id:
            return Break(
                row_id,
                "out_of_order",
                f"Row {row_id} (position {seq}) does not follow row {self.row_id or '-'} "
                "before it: it was inserted out of order, or the row before it was replaced.",
            )
        if (broken := self._keyed(row)) is not None:
            return broken
        self.seq, self.hash, self.row_id = seq, stored, row_id
        return None

    def _keyed(self, row: Any) -> Break | None:
        """The row's MAC, checked last: a content or link break names the row first."""
        if row.row_mac:
            if not mac_ok(row.row_hash, row.row_mac):
                return Break(
                    row.id,
                    "forged",
                    f"Row {row.id} (position {row.seq}, {row.action}) fails the audit key's "
                    "MAC: its hash was written by someone without the key (a rewrite of the "
                    "chain from this row on, or a changed SECRET_KEY).",
                )
            self.keyed_from = self.keyed_from or row.seq
        elif self.keyed_from is not None:
            return Break(
                row.id,
                "unkeyed",
                f"Row {row.id} (position {row.seq}) has no MAC though the rows from position "
                f"{self.keyed_from} have one: its MAC was removed, or it was written around "
                "the audit path.",
            )
        else:
            self.hash_only += 1
        return None


def _rows_after(seq: int, page_rows: int) -> Iterator[Any]:
    chained = AuditEvent.objects.order_by("seq").values_list(*FIELDS, named=True)
    while page := list(chained.filter(seq__gt=seq)[:page_rows]):
        yield from page
        seq = page[-1].seq


def _changed(row: Any) -> str:
    return (
        f"Row {row.id} (position {row.seq}, {row.action}) was changed: its content no longer "
        "matches its hash."
    )


def _first_unchained() -> Break | None:
    row_id = AuditEvent.objects.filter(seq__isnull=True).order_by("id").values_list("id").first()
    if row_id is None:
        return None
    return Break(
        row_id[0],
        "unchained",
        f"Row {row_id[0]} has no place in the chain: it was inserted around the audit write "
        "path, out of order.",
    )
