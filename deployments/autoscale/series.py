"""The autoscaler's figures per deployment in Redis: the decision's window and the page's
chart. A bounded list of JSON observations, newest last; a day at the controller's pace."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from controlpanel import redisconn
from deployments.autoscale.decide import Observation

KEEP = 17_280  # 24 h of 5 s ticks
_client = None


def _redis() -> Any:
    global _client
    if _client is None:
        _client = redisconn.client(connect_timeout_s=1.0, timeout_s=2.0)
    return _client


def key(deployment_id: int) -> str:
    return f"autoscale:series:{deployment_id}"


def append(deployment_id: int, observation: Observation, extra: dict[str, Any]) -> None:
    row = asdict(observation) | extra
    pipe = _redis().pipeline()
    pipe.rpush(key(deployment_id), json.dumps(row))
    pipe.ltrim(key(deployment_id), -KEEP, -1)
    pipe.execute()


def read(deployment_id: int, *, last: int = KEEP) -> list[dict[str, Any]]:
    return [json.loads(item) for item in _redis().lrange(key(deployment_id), -last, -1)]


def observations(deployment_id: int, *, since_s: float) -> list[Observation]:
    """The window the decision reads, oldest first."""
    fields = Observation.__dataclass_fields__
    rows = [r for r in read(deployment_id, last=400) if r["at_s"] >= since_s]
    return [Observation(**{k: r[k] for k in fields}) for r in rows]
