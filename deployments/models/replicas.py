"""A deployment of several replicas as one: its state derived from theirs, and the rows a page
shows for it.

Each replica is a ``Deployment`` row with its own GPUs, engine, port and state (the host worker
starts, watches, restarts and stops each on its own); the first replica's row stands for the
deployment on the pages, the others point at it (``replica_of``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .core import Status

DEGRADED = "degraded"
_DOWN = frozenset({Status.FAILED, Status.RESTARTING, Status.STOPPED})
_COMING_UP = frozenset({Status.PENDING, Status.STARTING, Status.RUNNING})
_IDLE_OR_UP = frozenset({Status.RUNNING, Status.SLEEPING, Status.SCALED_TO_ZERO})


@dataclass(frozen=True, slots=True)
class GroupState:
    status: str  # a Status value, or "degraded"
    running: int
    total: int

    @property
    def label(self) -> str:
        return "Degraded" if self.status == DEGRADED else Status(self.status).label

    @property
    def summary(self) -> str:
        """``2/3 replicas running``."""
        noun = "replica" if self.total == 1 else "replicas"
        return f"{self.running}/{self.total} {noun} running"


def overall(statuses: Sequence[str]) -> GroupState:
    """Running when every replica runs; degraded while some are down (failed, restarting or
    stopped on their own) and others up; stopping while any stops; failed once all ended and
    some failed; starting while the rest come up."""
    seen = {Status(s) for s in statuses}
    running = sum(s == Status.RUNNING for s in statuses)
    total = len(statuses)
    if len(seen) == 1:
        status: str = next(iter(seen))
    elif Status.STOPPING in seen:
        status = Status.STOPPING
    elif seen <= _IDLE_OR_UP:  # replicas going to sleep or waking one after the other
        status = Status.RUNNING if Status.RUNNING in seen else Status.SLEEPING
    elif seen <= {Status.STOPPED, Status.FAILED}:
        status = Status.FAILED
    elif seen & _DOWN:
        status = DEGRADED
    elif seen <= _COMING_UP:
        status = Status.STARTING
    else:
        status = DEGRADED
    return GroupState(status, running, total)
