"""The one audit row (and, for the playground page, the run) of each gateway request."""

from __future__ import annotations

import concurrent.futures
import time
from typing import TYPE_CHECKING

from django.db.models import Model

from playground.gateway import dbwork, ratelimit, rows
from playground.gateway.rows import Outcome
from playground.models import PlaygroundRun

if TYPE_CHECKING:
    from playground.gateway.admission import Exchange


class Recorder:
    """Records one request exactly once, whichever way it ends (done, failed, hung up).

    The write is handed to the database writer at once (committed with the others of the
    next WRITE_GROUP_S) and finishes even if the request is cancelled meanwhile; the answers
    that wait for it (the playground page shows the run's id, refusals) have it committed now.
    """

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self._future: concurrent.futures.Future[list[Model]] | None = None

    @property
    def done(self) -> bool:
        return self._future is not None

    def record(
        self, outcome: Outcome, *, urgent: bool = False
    ) -> concurrent.futures.Future[list[Model]]:
        if self._future is None:
            self._future = dbwork.submit(rows_of, self.exchange, outcome, urgent=urgent)
            _charge(self.exchange, outcome)
        return self._future

    async def record_and_wait(self, outcome: Outcome) -> int | None:
        """Recorded now; the run's id (None: not from the playground page)."""
        return run_id(await dbwork.wait(self.record(outcome, urgent=True)))


def _charge(exchange: Exchange, outcome: Outcome) -> None:
    """The answer's tokens, counted against the caller's daily limits (gateway.ratelimit)."""
    timings = outcome.timings
    used = (timings.get("prompt_tokens") or 0) + (timings.get("completion_tokens") or 0)
    if used:
        user_id = exchange.caller.user.pk
        ratelimit.charge_soon(
            user_id,
            exchange.bearer_id,
            int(used),
            time.time(),
            ratelimit.limits_of(exchange.caller),
        )


def rows_of(exchange: Exchange, outcome: Outcome) -> list[Model]:
    """The audit row, and the run when the playground page asked."""
    target = exchange.target
    audit = rows.gateway_audit_row(
        user=exchange.caller.user,
        via=exchange.caller.via,
        call=exchange.call,
        deployment=(target.deployment_id, target.name),
        outcome=outcome,
        length=exchange.length,
        ip=exchange.ip,
        bearer_id=exchange.bearer_id,
        adapter=target.adapter,
    )
    if not exchange.from_playground:
        return [audit]
    run = rows.run_row(
        user=exchange.caller.user, deployment_name=target.name, call=exchange.call, outcome=outcome
    )
    return [audit, run]


def run_id(rows: list[Model]) -> int | None:
    return next((row.pk for row in rows if isinstance(row, PlaygroundRun)), None)
