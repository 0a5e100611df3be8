"""The vLLM 0.33 stand-in keeps vLLM's contract and a fixed capacity (real queueing)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.standins import standin
from tests.support.waiting import wait_for

KEY = "sk-standin"


def samples(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(url: str, name: str, **labels: str) -> float:
    wanted = {"model_name": "tiny", "engine": "0", **labels}
    return samples(url)[(name, frozenset(wanted.items()))]


def test_beyond_capacity_requests_wait_and_ttft_grows() -> None:
    with standin("--max-num-seqs", "2", VLLM_STANDIN_TOKEN_S="0.1") as url:
        body = {"model": "tiny", "prompt": "one two three", "max_tokens": 5}

        def timed() -> float:
            started = time.monotonic()
            with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True},
                              timeout=30) as response:  # fmt: skip
                lines = response.iter_lines()
                next(line for line in lines if line.startswith("data: {"))
                first = time.monotonic() - started
                list(lines)
            return first

        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(timed) for _ in range(6)]
            wait_for(lambda: value(url, "vllm:num_requests_waiting") >= 1, interval_s=0.02)
            assert value(url, "vllm:num_requests_running") == 2
            assert value(url, "vllm:kv_cache_usage_perc") > 0
            ttfts = sorted(f.result() for f in futures)
        # Two slots, 0.5 s a request: the last pair waits two whole requests before its start.
        assert ttfts[-1] > ttfts[0] + 0.8
        assert value(url, "vllm:time_to_first_token_seconds_count") == 6
        assert value(url, "vllm:generation_tokens_total") == 30
        assert value(url, "vllm:request_time_per_output_token_seconds_count") == 6
        assert value(url, "vllm:num_requests_waiting") == 0


def test_api_key_guards_v1_only_and_usage_is_reported() -> None:
    with standin("--api-key", KEY, VLLM_STANDIN_TOKEN_S="0.001") as url:
        assert httpx.get(f"{url}/v1/models").status_code == 401
        assert httpx.get(f"{url}/metrics").status_code == 200
        auth = {"Authorization": f"Bearer {KEY}"}
        models = httpx.get(f"{url}/v1/models", headers=auth).json()
        assert models["data"][0]["id"] == "tiny"
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi there"}],
                "max_tokens": 3}  # fmt: skip
        answer = httpx.post(f"{url}/v1/chat/completions", json=chat, headers=auth).json()
        assert answer["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
        streamed = httpx.post(f"{url}/v1/chat/completions", headers=auth, json={
            **chat, "stream": True, "stream_options": {"include_usage": True}}).text  # fmt: skip
        events = [e.removeprefix("data: ") for e in streamed.split("\n\n") if e]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["choices"] == []
        assert json.loads(events[-2])["usage"]["completion_tokens"] == 3


def test_sleep_and_wake_in_dev_mode_only() -> None:
    with standin(VLLM_STANDIN_TOKEN_S="0.001") as url:
        assert httpx.post(f"{url}/sleep?level=1").status_code == 404
    with standin(VLLM_SERVER_DEV_MODE="1", VLLM_STANDIN_TOKEN_S="0.001") as url:
        assert value(url, "vllm:engine_sleep_state", sleep_state="awake") == 1
        assert httpx.post(f"{url}/sleep?level=1").json() == {"status": "sleeping", "level": 1}
        assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": True}
        assert value(url, "vllm:engine_sleep_state", sleep_state="weights_offloaded") == 1
        partial = httpx.post(f"{url}/wake_up?tags=weights").json()
        assert partial == {"status": "sleeping", "tags": ["weights"]}
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(httpx.post, f"{url}/v1/completions",
                               json={"prompt": "x", "max_tokens": 2}, timeout=30)  # fmt: skip
            wait_for(lambda: value(url, "vllm:num_requests_waiting") == 1)
            assert httpx.post(f"{url}/wake_up").json() == {"status": "awake", "tags": None}
            assert held.result().status_code == 200
        assert value(url, "vllm:engine_sleep_state", sleep_state="awake") == 1
