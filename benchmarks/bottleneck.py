"""Where a level's bottleneck is, from its figures, its GPU samples and the engine's gauges. Pure.

The classes and the advice are the performance-testing guides' own: KV-cache (VRAM) bound,
compute bound, communication bound, client/I-O bound; plus "headroom" (nothing saturated yet)
and "unknown" (not enough evidence). Each reading carries the numbers that led to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KV_FULL = 0.90  # vllm:kv_cache_usage_perc at or above: the cache is (nearly) full
COMPUTE_UTIL_PCT = 90.0
IDLE_UTIL_PCT = 40.0  # GPUs this idle while the host is busy: the host is the limit
LOW_UTIL_PCT = 50.0  # several GPUs this idle while throughput is flat: they wait on each other
BUSY_CPU_PCT = 85.0
FLAT_GAIN = 0.10  # throughput grew by less than this when the load rose: flat
FAILED_SHARE = 0.5

ADVICE = {
    "kv_cache": (
        "KV-cache bound",
        "The KV cache is full: requests wait or are preempted and recomputed. Lower the "
        "concurrency or --max-num-seqs, shorten --max-model-len, quantize the KV cache "
        "(--kv-cache-dtype fp8) or the weights, raise --gpu-memory-utilization, or spread the "
        "model over more GPUs (more tensor-parallel ranks or replicas) to make room.",
    ),
    "compute": (
        "Compute bound",
        "The GPUs are busy: more load only queues. For more throughput add replicas or GPUs, "
        "or use FP8/INT8 weights; for lower latency at this load, serve fewer concurrent "
        "requests per replica.",
    ),
    "communication": (
        "Communication bound",
        "Several GPUs, low utilization and throughput flat as the load rises: the ranks wait "
        "on each other. Use fewer tensor-parallel ranks and more replicas (e.g. TP 2 × 2 "
        "replicas instead of TP 4), keep tensor parallelism on NVLink-connected GPUs, and use "
        "pipeline parallelism across slow links.",
    ),
    "client_io": (
        "Client / I-O bound",
        "The GPUs are idle while the host's CPUs are busy: tokenization, detokenization, the "
        "HTTP server or the load generator is the limit. Run the load generator on another "
        "machine, add API server processes (--api-server-count), or give the host more CPU.",
    ),
    "headroom": (
        "Not saturated",
        "Throughput still rises with the load and nothing is full: try higher concurrency "
        "to find the knee.",
    ),
    "errors": (
        "Requests failing",
        "Most requests failed, so the figures describe failures: read the errors and the "
        "engine log before reading the throughput.",
    ),
    "unknown": (
        "No clear bottleneck",
        "The evidence points nowhere in particular (or is missing): run longer levels so that "
        "the GPU samples and engine gauges cover them, or add levels.",
    ),
}


@dataclass(frozen=True, slots=True)
class LevelEvidence:
    load: float  # the level's concurrency, or its request rate
    gpu_count: int
    output_throughput: float
    requests: int = 0
    failed: int = 0
    gpu_util_pct: float | None = None  # mean over the level and the deployment's GPUs
    gpu_memory_pct: float | None = None  # max used / total
    host_cpu_pct: float | None = None
    client_cpu_pct: float | None = None  # the load generator's process, of one core
    kv_usage: float | None = None  # max, 0..1
    waiting: float | None = None  # mean requests waiting
    preemptions: float | None = None
    previous_load: float | None = None
    previous_throughput: float | None = None
    simulated: bool = False
    load_label: str = "concurrency"


@dataclass(frozen=True, slots=True)
class Reading:
    kind: str
    title: str
    advice: str
    evidence: tuple[tuple[str, str], ...] = field(default=())
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "title": self.title,
            "advice": self.advice,
            "evidence": [list(e) for e in self.evidence],
            "note": self.note,
        }


def throughput_gain(e: LevelEvidence) -> float | None:
    """Relative output-throughput change from the previous, lower level (None for the first)."""
    if e.previous_throughput is None or e.previous_load is None:
        return None
    if e.previous_load >= e.load or e.previous_throughput <= 0:
        return None
    return e.output_throughput / e.previous_throughput - 1


def classify(e: LevelEvidence) -> str:
    gain = throughput_gain(e)
    flat = gain is not None and gain < FLAT_GAIN
    util = e.gpu_util_pct
    if e.requests and e.failed / e.requests >= FAILED_SHARE:
        return "errors"
    if (e.preemptions or 0) > 0 or (
        (e.kv_usage or 0) >= KV_FULL and ((e.waiting or 0) > 0 or flat)
    ):
        return "kv_cache"
    busy_host = max(e.host_cpu_pct or 0, e.client_cpu_pct or 0) >= BUSY_CPU_PCT
    if util is not None and util < IDLE_UTIL_PCT and busy_host:
        return "client_io"
    if util is not None and util >= COMPUTE_UTIL_PCT:
        return "compute"
    if e.gpu_count > 1 and util is not None and util < LOW_UTIL_PCT and flat:
        return "communication"
    if util is not None and not flat:
        return "headroom"
    return "unknown"


def read_level(e: LevelEvidence) -> Reading:
    kind = classify(e)
    title, advice = ADVICE[kind]
    note = (
        "Simulated GPUs: their utilization follows the load the benchmark applies, not a real "
        "GPU's, so this reading exercises the rules rather than measures hardware."
        if e.simulated
        else ""
    )
    return Reading(kind, title, advice, evidence(e), note)


def evidence(e: LevelEvidence) -> tuple[tuple[str, str], ...]:
    gain = throughput_gain(e)
    rows = [
        (e.load_label, f"{e.load:g}" + (" req/s" if e.load_label == "request rate" else "")),
        ("output throughput", f"{e.output_throughput:.1f} tok/s"),
        ("gain over the previous level", None if gain is None else f"{gain * 100:+.0f} %"),
        ("failed requests", f"{e.failed} of {e.requests}" if e.requests else None),
        ("GPU utilization (mean)", _pct(e.gpu_util_pct)),
        ("GPU memory used (max)", _pct(e.gpu_memory_pct)),
        ("GPUs", str(e.gpu_count)),
        ("KV-cache usage (max)", None if e.kv_usage is None else f"{e.kv_usage * 100:.0f} %"),
        ("requests waiting (mean)", None if e.waiting is None else f"{e.waiting:.1f}"),
        ("preemptions", None if e.preemptions is None else f"{e.preemptions:.0f}"),
        ("host CPU (mean)", _pct(e.host_cpu_pct)),
        ("load generator CPU (of one core)", _pct(e.client_cpu_pct)),
    ]
    return tuple((label, value) for label, value in rows if value is not None)


def _pct(value: float | None) -> str | None:
    return None if value is None else f"{value:.0f} %"


def read_levels(levels: list[LevelEvidence]) -> list[Reading]:
    return [read_level(e) for e in levels]


def compare_layouts(
    fewer_ranks: tuple[int, float], more_ranks: tuple[int, float]
) -> Reading | None:
    """Two runs of one model, (TP ranks, best output tok/s) each: a communication-bound reading
    when the layout with more ranks was not at least FLAT_GAIN faster."""
    (tp_a, best_a), (tp_b, best_b) = fewer_ranks, more_ranks
    if tp_b <= tp_a or best_a <= 0 or best_b >= best_a * (1 + FLAT_GAIN):
        return None
    title, advice = ADVICE["communication"]
    rows = (
        (f"TP {tp_a} best output throughput", f"{best_a:.1f} tok/s"),
        (f"TP {tp_b} best output throughput", f"{best_b:.1f} tok/s"),
        ("change with more ranks", f"{(best_b / best_a - 1) * 100:+.0f} %"),
    )
    return Reading("communication", title, advice, rows)
