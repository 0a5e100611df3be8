"""The engine's own gauges while a level runs: vLLM's `/metrics` (running and waiting requests,
KV-cache usage, preemptions). Engines without it (transformers serve answers 404) give none.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

POLL_S = 1.0
WANTED = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:num_preemptions_total": "preemptions",
}


def parse_prometheus(text: str) -> dict[str, float]:
    """The wanted series, summed over their labels (one value per engine and model)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{") if "{" in line else line.partition(" ")
        key = WANTED.get(name.strip())
        if key is None:
            continue
        value_text = rest.rsplit("}", 1)[-1].split()[0] if "}" in rest else rest.split()[0]
        try:
            found[key] = found.get(key, 0.0) + float(value_text)
        except ValueError:
            continue
    return found


def summarize_engine(samples: list[dict[str, float]]) -> dict[str, Any]:
    """Max/mean of the gauges over a level, and the preemptions counted during it."""
    if not samples:
        return {"available": False}

    def series(key: str) -> list[float]:
        return [s[key] for s in samples if key in s]

    running, waiting, kv = series("running"), series("waiting"), series("kv_usage")
    preempt = series("preemptions")
    return {
        "available": True,
        "samples": len(samples),
        "running_max": max(running, default=None),
        "waiting_max": max(waiting, default=None),
        "waiting_mean": round(sum(waiting) / len(waiting), 3) if waiting else None,
        "kv_usage_max": max(kv, default=None),
        "kv_usage_mean": round(sum(kv) / len(kv), 4) if kv else None,
        "preemptions": (preempt[-1] - preempt[0]) if len(preempt) > 1 else 0.0,
    }


class EngineMetricsPoller:
    def __init__(self, session: aiohttp.ClientSession, base_url: str) -> None:
        self.session, self.url = session, f"{base_url.rstrip('/')}/metrics"
        self.samples: list[dict[str, float]] = []

    async def run(self) -> None:
        while True:
            if not await self.poll_once():
                return
            await asyncio.sleep(POLL_S)

    async def poll_once(self) -> bool:
        """Read once; False when the engine has no /metrics (no point asking again)."""
        try:
            async with self.session.get(self.url) as response:
                if response.status == 404:
                    return False
                if response.status == 200:
                    self.samples.append(parse_prometheus(await response.text()))
        except (aiohttp.ClientError, TimeoutError):
            pass  # an engine under load or gone: the requests' own errors tell which
        return True

    def summary(self) -> dict[str, Any]:
        return summarize_engine(self.samples)
