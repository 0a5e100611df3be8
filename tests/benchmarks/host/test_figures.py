"""The load generator's figures, the workload's validation and the plan-vs-measured summary:
pure functions, checked against hand-computed numbers (numpy.percentile's linear rule)."""

from __future__ import annotations

import pytest

from benchmarks.host.loadgen.client import Target, _Timing, payload
from benchmarks.host.loadgen.metrics_poll import parse_prometheus, summarize_engine
from benchmarks.host.loadgen.stats import RequestResult, meets_sla, percentile, summarize
from benchmarks.summary import highest_sustained, histogram, plan_vs_measured
from benchmarks.workload import WorkloadError, parse_workload, request_stream


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [([1, 2, 3, 4], 50, 2.5), ([1, 2, 3, 4], 99, 3.97), ([5], 95, 5), ([10, 20], 90, 19)],
)
def test_percentile_is_linear_like_numpy(values, p, expected) -> None:
    assert percentile(values, p) == pytest.approx(expected)


def ok(ttft: float, itl: list[float], tokens: int, prompt: int = 10) -> RequestResult:
    latency = ttft + sum(itl)
    return RequestResult(True, 0.0, ttft, itl, latency, tokens, prompt)


def test_summary_follows_vllm_bench_serve() -> None:
    results = [
        ok(0.1, [0.01, 0.03], 3),  # TPOT (0.14 - 0.1) / 2 = 20 ms
        ok(0.2, [0.02], 2),  # TPOT 20 ms
        ok(0.3, [], 1),  # one token: no TPOT, no ITL
        RequestResult(error="HTTP 500: boom"),
    ]
    s = summarize(results, duration_s=2.0)
    assert (s["requests"], s["completed"], s["failed"]) == (4, 3, 1)
    assert s["errors"] == [{"error": "HTTP 500: boom", "count": 1}]
    assert s["output_tokens"] == 6 and s["prompt_tokens"] == 30
    assert s["request_throughput"] == 1.5 and s["output_throughput"] == 3.0
    assert s["total_token_throughput"] == 18.0
    assert s["ttft_ms"]["mean"] == pytest.approx(200) and s["ttft_ms"]["p50"] == pytest.approx(200)
    assert s["tpot_ms"]["mean"] == pytest.approx(20)
    assert s["itl_ms"]["p50"] == pytest.approx(20) and s["itl_ms"]["mean"] == pytest.approx(20)
    assert s["e2el_ms"]["p99"] == pytest.approx(298.4)  # 220 + 0.98 x (300 - 220)
    assert s["samples"]["ttft_ms"] == [100.0, 200.0, 300.0]


def test_timing_reads_both_dialects() -> None:
    vllm = RequestResult()
    t = _Timing(vllm, 0.0)
    for now, event in [
        (0.5, b'data: {"choices":[{"text":"a"}]}'),
        (0.6, b'data: {"choices":[{"text":"b"}]}'),
        (0.7, b'data: {"choices":[],"usage":{"completion_tokens":2,"prompt_tokens":7}}'),
        (0.8, b"data: [DONE]"),
    ]:
        t.event(event, now)
    t.finish()
    assert vllm.ok and vllm.ttft_s == 0.5 and vllm.itl_s == [pytest.approx(0.1)]
    assert vllm.latency_s == 0.6 and (vllm.output_tokens, vllm.prompt_tokens) == (2, 7)
    tf = RequestResult()
    t = _Timing(tf, 0.0)
    t.event(b'data: {"choices":[{"text":"a"}]}', 0.2)
    closing = b'data: {"choices":[{"text":"","finish_reason":"length"}],"usage":{"completion_tokens":1,"prompt_tokens":3}}'
    t.event(closing, 0.9)
    t.finish()
    assert tf.ok and tf.latency_s == 0.2 and tf.itl_s == [] and tf.output_tokens == 1
    nothing = RequestResult()
    _Timing(nothing, 0.0).finish()
    assert not nothing.ok and "Never received" in nothing.error


def test_payload_per_engine() -> None:
    vllm = payload(Target("http://e", model="m", api_key="k", ignore_eos=True), "hi", 8)
    assert vllm["model"] == "m" and vllm["ignore_eos"] and vllm["stream_options"]
    tf = payload(Target("http://e"), "hi", 8)
    assert "model" not in tf and "ignore_eos" not in tf


def test_engine_gauges_from_prometheus_text() -> None:
    text = """# HELP vllm:num_requests_running x
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9
"""
    first = parse_prometheus(text)
    assert first == {"running": 4.0, "waiting": 2.0, "kv_usage": 0.5, "preemptions": 3.0}
    later = {**first, "kv_usage": 0.97, "preemptions": 7.0, "waiting": 0.0}
    s = summarize_engine([first, later])
    assert s["kv_usage_max"] == 0.97 and s["preemptions"] == 4.0 and s["waiting_mean"] == 1.0
    assert summarize_engine([]) == {"available": False}


def test_meets_sla() -> None:
    s = summarize([ok(0.1, [0.05], 2), ok(0.2, [0.05], 2)], 1.0)
    assert meets_sla(s, 300, 60) and not meets_sla(s, 150, None) and not meets_sla(s, None, 40)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"prompt": 10, "output": 5, "levels": "1,x", "requests_per_level": 4}, "whole numbers"),
        ({"prompt": 10, "output": 5, "levels": "0", "requests_per_level": 4}, "each above 0"),
        ({"prompt": 10, "output": 5, "levels": "1"}, "either"),
        (
            {"prompt": 10, "output": 5, "levels": "1", "requests_per_level": 4, "duration_s": 5},
            "either",
        ),
        ({"prompt": "many", "output": 5, "levels": "1", "requests_per_level": 4}, "not a number"),
        (
            {"prompt": {"mean": 10, "kind": "zipf"}, "output": 5, "levels": "1", "duration_s": 5},
            "distribution",
        ),
        (
            {
                "prompt": {"mean": 10, "kind": "uniform", "spread": 10},
                "output": 5,
                "levels": "1",
                "duration_s": 5,
            },
            "below its mean",
        ),
    ],
)
def test_bad_workloads_say_why(data, message) -> None:
    with pytest.raises(WorkloadError, match=message):
        parse_workload(data)


def test_workload_round_trips_and_repeats() -> None:
    w = parse_workload(
        {
            "prompt": {"mean": 20, "kind": "uniform", "spread": 5},
            "output": {"mean": 8, "kind": "normal", "spread": 2},
            "levels": "4, 1,2,2",
            "duration_s": "3",
            "seed": 7,
        }
    )
    assert w.levels == (1, 2, 4) and parse_workload(w.to_dict()) == w
    a, b = request_stream(w, 1), request_stream(w, 1)
    assert [next(a) for _ in range(5)] == [next(b) for _ in range(5)]
    words = [len(p.text.split()) for p in (next(a) for _ in range(50))]
    assert min(words) >= 15 and max(words) <= 25
    uploaded = parse_workload(
        {"prompt": 5, "output": 5, "levels": "1", "duration_s": 2, "prompts": "a\n\nb\n"}
    )
    stream = request_stream(uploaded, 0)
    assert [next(stream).text for _ in range(3)] == ["a", "b", "a"]


def test_plan_vs_measured() -> None:
    levels = [
        {
            "load": 1,
            "failed": 0,
            "completed": 10,
            "stopped": "",
            "prompt_tokens": 1000,
            "output_tokens": 500,
            "ttft_ms": {"p95": 50},
            "itl_ms": {"p95": 5},
        },
        {
            "load": 4,
            "failed": 0,
            "completed": 10,
            "stopped": "",
            "prompt_tokens": 1000,
            "output_tokens": 500,
            "ttft_ms": {"p95": 120},
            "itl_ms": {"p95": 9},
        },
        {
            "load": 16,
            "failed": 2,
            "completed": 8,
            "stopped": "",
            "prompt_tokens": 800,
            "output_tokens": 400,
            "ttft_ms": {"p95": 400},
            "itl_ms": {"p95": 20},
        },
    ]
    assert highest_sustained(levels, {}) == 4
    assert highest_sustained(levels, {"sla_ttft_p95_ms": 100}) == 1
    layout = {"plan_max_concurrency": 3.5, "plan_kv_cache_tokens": 3000}
    pvm = plan_vs_measured(layout, levels, {})
    assert pvm["request_tokens"] == 150.0 and pvm["plan_at_workload"] == 20.0
    assert pvm["sustained"] == 4 and pvm["highest_tested"] == 16
    assert "below what the KV cache holds" in pvm["note"]


def test_rate_levels() -> None:
    w = parse_workload(
        {"prompt": 5, "output": 5, "levels": "2, 0.5", "requests_per_level": 3, "mode": "rate",
         "max_concurrency": 8}
    )  # fmt: skip
    assert w.levels == (0.5, 2.0) and w.max_concurrency == 8
    assert "request rate 0.5, 2 req/s (Poisson arrivals, at most 8 in flight)" in w.describe()
    assert parse_workload(w.to_dict()) == w
    closed = parse_workload({"prompt": 5, "output": 5, "levels": "2", "duration_s": 3,
                             "max_concurrency": 8})  # fmt: skip
    assert closed.mode == "concurrency" and closed.max_concurrency is None
    for bad, message in [({"levels": "0"}, "above 0"), ({"levels": "1", "mode": "burst"}, "Mode")]:
        with pytest.raises(WorkloadError, match=message):
            parse_workload({"prompt": 5, "output": 5, "duration_s": 3, "mode": "rate", **bad})
    levels = [
        {"load": 1.0, "rate": 1.0, "failed": 0, "completed": 5, "stopped": "", "peak_in_flight": 2,
         "prompt_tokens": 50, "output_tokens": 50, "ttft_ms": {"p95": 10}, "itl_ms": {"p95": 1}},
        {"load": 4.0, "rate": 4.0, "failed": 1, "completed": 4, "stopped": "", "peak_in_flight": 9,
         "prompt_tokens": 40, "output_tokens": 40, "ttft_ms": {"p95": 10}, "itl_ms": {"p95": 1}},
    ]  # fmt: skip
    pvm = plan_vs_measured({"plan_max_concurrency": 3.5}, levels, {"mode": "rate"})
    assert (pvm["sustained_rate"], pvm["sustained"]) == (1.0, 2)
    assert pvm["note"] == "Sustained 1 req/s, with at most 2 requests in flight."


def test_histogram() -> None:
    h = histogram([0, 1, 2, 3, 10], bins=5)
    assert sum(h["y"]) == 5 and h["y"][0] == 2 and h["y"][-1] == 1
    assert histogram([]) == {"x": [], "y": [], "width": []}
    assert histogram([4, 4])["y"][0] == 2
