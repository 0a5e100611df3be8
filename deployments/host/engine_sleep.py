"""The requests that put a vLLM engine to sleep and wake it (routes and answers:
deployments.engines.sleep, from vLLM 0.33's sources). Sync: the host worker's threads send them."""

from __future__ import annotations

import httpx

from controlpanel import enginehttp
from deployments.engines import sleep

# A level-1 sleep copies the weights to host RAM and a wake copies them back: about 3 s for
# 64 GiB in llm-d's measurements (issue 30); a level-2 wake reloads them from disk. Both well
# inside this bound on any model one host holds.
SLEEP_TIMEOUT_S = 300.0


class EngineSleepError(Exception):
    """The engine refused or failed a sleep or wake request; the message says what it answered."""


def put_to_sleep(base_url: str, level: int) -> None:
    # mode=wait: a request that slipped in before the drain finishes instead of being aborted
    # (vLLM's default "abort"); the drain has normally emptied the engine already.
    _post(base_url, sleep.SLEEP_PATH, params={"level": level, "mode": "wait"})


def wake_up(base_url: str, level: int) -> None:
    answer = _post(base_url, sleep.WAKE_PATH)
    if answer.get("status") != "awake":
        raise EngineSleepError(f"wake_up answered {answer}: some of the engine still sleeps")
    if level == 2:  # the weights were discarded: load them from the model's files again
        _post(base_url, sleep.RPC_PATH, json={"method": "reload_weights"})


def is_sleeping(base_url: str) -> bool:
    try:
        answer = enginehttp.client().get(base_url + sleep.IS_SLEEPING_PATH, timeout=10.0)
        answer.raise_for_status()
    except httpx.HTTPError as exc:
        raise EngineSleepError(f"{sleep.IS_SLEEPING_PATH}: {exc}") from exc
    return bool(answer.json().get("is_sleeping"))


def _post(
    base_url: str,
    path: str,
    *,
    params: dict[str, int | str] | None = None,
    json: dict[str, str] | None = None,
) -> dict[str, object]:
    try:
        answer = enginehttp.client().post(
            base_url + path, params=params, json=json, timeout=SLEEP_TIMEOUT_S
        )
        answer.raise_for_status()
    except httpx.HTTPError as exc:
        raise EngineSleepError(f"{path}: {exc}") from exc
    if not answer.content:
        return {}
    body = answer.json()
    return body if isinstance(body, dict) else {"results": body}
