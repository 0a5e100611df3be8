"""One streamed completion request, timed the way `vllm bench serve` times it. No Django.

Both streaming dialects: vLLM (a usage chunk with empty `choices`, then `data: [DONE]`) and
transformers serve (usage on its last chunk, whose text is empty; no [DONE]).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from benchmarks.host.loadgen.stats import RequestResult

NO_CHUNK = "Never received a valid chunk to calculate TTFT."


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how to ask: `model` None for engines pinned to one model (transformers serve)."""

    base_url: str
    model: str | None = None
    api_key: str | None = None
    ignore_eos: bool = False  # vLLM: hold the output length to max_tokens

    @property
    def completions_url(self) -> str:
        return f"{self.base_url.rstrip('/')}/v1/completions"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def payload(target: Target, prompt: str, max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if target.model:
        body["model"] = target.model
    if target.ignore_eos:
        body["ignore_eos"] = True
    return body


class _Timing:
    """Chunk times of one answer, fed event by event."""

    def __init__(self, result: RequestResult, started_s: float) -> None:
        self.result, self.started_s = result, started_s
        self.last_s: float | None = None
        self.chunks = 0

    def event(self, data: bytes, now_s: float) -> None:
        if not data.startswith(b"data:"):
            return
        body = data[5:].strip()
        if body == b"[DONE]" or not body:
            return
        chunk = json.loads(body)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.result.output_tokens = int(usage.get("completion_tokens") or 0)
            self.result.prompt_tokens = usage.get("prompt_tokens")
        choices = chunk.get("choices") or []
        if not choices:
            if chunk.get("error"):
                self.result.error = str(chunk["error"])[:300]
            return
        if not choices[0].get("text") and choices[0].get("finish_reason"):
            return  # transformers' closing chunk: no token in it
        if self.last_s is None:
            self.result.ttft_s = now_s - self.started_s
        else:
            self.result.itl_s.append(now_s - self.last_s)
        self.last_s = now_s
        self.chunks += 1

    def finish(self) -> None:
        r = self.result
        if self.last_s is None:
            r.error = r.error or NO_CHUNK
            return
        r.ok = not r.error
        r.latency_s = self.last_s - self.started_s
        if not r.output_tokens:
            r.output_tokens = self.chunks  # no usage reported: one token a chunk


async def send(
    session: aiohttp.ClientSession, target: Target, prompt: str, max_tokens: int
) -> RequestResult:
    """One request; errors become the result's `error`, never an exception (but cancellation)."""
    started = time.perf_counter()
    result = RequestResult(started_s=started)
    timing = _Timing(result, started)
    try:
        async with session.post(
            target.completions_url,
            json=payload(target, prompt, max_tokens),
            headers=target.headers,
        ) as response:
            if response.status != 200:
                text = (await response.text())[:300]
                result.error = f"HTTP {response.status}: {text}"
                return result
            await _read_events(response, timing)
    except aiohttp.ClientConnectorError as exc:
        result.error = f"cannot connect: {exc.os_error or exc}"
        result.engine_gone = isinstance(exc.os_error, ConnectionRefusedError)
        return result
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"[:300] or type(exc).__name__
    timing.finish()
    if result.error:
        result.ok = False
    return result


async def _read_events(response: aiohttp.ClientResponse, timing: _Timing) -> None:
    buffer = b""
    async for data in response.content.iter_any():
        now = time.perf_counter()
        buffer += data.replace(b"\r\n", b"\n") if b"\r" in data else data
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            timing.event(event.strip(), now)
    if buffer.strip():
        timing.event(buffer.strip(), time.perf_counter())
