"""HTTP checks against a starting engine: readiness and a smoke completion. Never raise."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import httpx

from controlpanel import enginehttp
from deployments.engines.base import ReadinessProbe

PROBE_TIMEOUT_S = 5.0  # one readiness poll
SMOKE_PROMPT = "1 + 1 ="


ReadyOutcome = Literal["ready", "exited", "timeout", "unauthorized"]


@dataclass(frozen=True, slots=True)
class ReadyResult:
    outcome: ReadyOutcome
    reason: str
    elapsed_s: float

    @property
    def ready(self) -> bool:
        return self.outcome == "ready"


@dataclass(frozen=True, slots=True)
class SmokeResult:
    ok: bool
    text: str
    reason: str
    elapsed_s: float
    status_code: int | None


def wait_ready(
    base_url: str,
    probe: ReadinessProbe,
    timeout_s: float,
    is_alive_fn: Callable[[], bool],
    poll_s: float = 0.5,
) -> ReadyResult:
    """Poll until the engine answers; refused connections mean it is still loading.

    The interval grows from 50 ms to `poll_s`: a small model is up within a second, and a
    fixed half-second poll would add up to half a second to every launch.
    """
    start = time.monotonic()
    last = "no answer yet"
    delay_s = min(0.05, poll_s)
    while True:
        elapsed_s = time.monotonic() - start
        if not is_alive_fn():
            return ReadyResult("exited", f"the engine exited while loading ({last})", elapsed_s)
        outcome, last = _probe_once(base_url, probe)
        if outcome is not None:
            return ReadyResult(outcome, last, time.monotonic() - start)
        if elapsed_s >= timeout_s:
            return ReadyResult("timeout", f"not ready after {timeout_s:.0f} s ({last})", elapsed_s)
        time.sleep(min(delay_s, max(0.0, timeout_s - elapsed_s)))
        delay_s = min(poll_s, delay_s * 2)


def _probe_once(base_url: str, probe: ReadinessProbe) -> tuple[ReadyOutcome | None, str]:
    client = enginehttp.client()
    try:
        health = client.get(base_url + probe.health_path, timeout=PROBE_TIMEOUT_S)
        if health.status_code != 200:
            return None, f"{probe.health_path} answered {health.status_code}"
        if probe.models_path is None:
            return "ready", f"{probe.health_path} answered 200"
        models = client.get(
            base_url + probe.models_path,
            headers=_auth_headers(probe.api_key),
            timeout=PROBE_TIMEOUT_S,
        )
    except httpx.TransportError as error:
        return None, f"not answering yet: {type(error).__name__}"
    if models.status_code in (401, 403):
        return "unauthorized", f"{probe.models_path} refused the API key ({models.status_code})"
    if models.status_code != 200:
        return None, f"{probe.models_path} answered {models.status_code}"
    return _check_models(models, probe)


def _check_models(models: httpx.Response, probe: ReadinessProbe) -> tuple[ReadyOutcome | None, str]:
    try:
        ids = [m.get("id") for m in models.json().get("data", [])]
    except (ValueError, AttributeError) as error:
        return None, f"{probe.models_path} answered an unexpected body ({error})"
    if probe.expected_model is not None and probe.expected_model not in ids:
        return None, f"{probe.models_path} lists {ids}, not {probe.expected_model!r} yet"
    return "ready", f"{probe.models_path} lists {ids}"


def _auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def smoke_test(
    base_url: str,
    model_name: str | None,
    api_key: str | None,
    *,
    timeout_s: float = 60.0,
    max_tokens: int = 8,
    prompt: str = SMOKE_PROMPT,
    embeds: bool = False,
) -> SmokeResult:
    """One short completion; any non-error answer passes (the demo model answers nonsense).
    An embedding model (``embeds``) is asked for one embedding instead: vLLM's pooling runner
    serves no completions."""
    body: dict[str, object] = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
    if embeds:
        body = {"input": prompt}
    if model_name is not None:
        body["model"] = model_name
    start = time.monotonic()
    try:
        response = enginehttp.client().post(
            f"{base_url}/v1/{'embeddings' if embeds else 'completions'}",
            json=body,
            headers=_auth_headers(api_key),
            timeout=timeout_s,
        )
    except httpx.TransportError as error:
        return SmokeResult(False, "", f"request failed: {error!r}", time.monotonic() - start, None)
    elapsed_s = time.monotonic() - start
    if response.status_code != 200:
        reason = f"HTTP {response.status_code}: {response.text[:300]}"
        return SmokeResult(False, "", reason, elapsed_s, response.status_code)
    try:
        text = embedding_text(response) if embeds else completion_text(response)
    except (ValueError, AttributeError) as error:
        reason = f"the answer is not a completion ({error}): {response.text[:300]}"
        return SmokeResult(False, "", reason, elapsed_s, response.status_code)
    return SmokeResult(True, text, "answered", elapsed_s, response.status_code)


def embedding_text(response: httpx.Response) -> str:
    """ "N dimensions" of the first embedding; a ValueError when there is none."""
    data = response.json().get("data")
    vector = data[0].get("embedding") if isinstance(data, list) and data else None
    if not isinstance(vector, list) or not vector:
        raise ValueError("no embedding in the answer")
    return f"an embedding of {len(vector)} dimensions"


def completion_text(response: httpx.Response) -> str:
    """The text of a completion, JSON or SSE (vLLM ends with [DONE]; transformers does not)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return "".join(_choice_text(event) for event in sse_events(response.text))
    return _choice_text(response.json())


def sse_events(body: str) -> list[dict[str, object]]:
    events = []
    for line in body.splitlines():
        data = line.removeprefix("data:").strip() if line.startswith("data:") else ""
        if data and data != "[DONE]":
            events.append(json.loads(data))
    return events


def _choice_text(payload: Mapping[str, object]) -> str:
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices:
        return ""  # e.g. vLLM's final usage-only chunk
    choice = choices[0]
    text = choice.get("text")
    if text is None:
        part = choice.get("message") or choice.get("delta") or {}
        text = part.get("content")
    return text if isinstance(text, str) else ""
