"""The memory figures an engine printed while it started, for calibrating the planner. Pure:
lines in, figures out.

vLLM 0.33's own lines (reference apis.md §1.4, vllm-memory.md; source cited at each pattern):
the version, "Model loading took … GiB" (rank 0: the first such line), "Available KV cache
memory", "GPU KV cache size: N tokens" and the CUDA-graph pool; its 0.32 CPU build prints the
KV space and "CPU KV cache size: N tokens", and no weights or graph figure. transformers serve prints no
memory figure; what it has is the count of weight tensors it loaded (its "Loading weights" bar).
llama-server's per-device buffer lines are read by ``llamacpp_memory`` (reused here). A start
that vLLM refused for memory says so in one of the lines of ``_FAILURES``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from deployments.engines.llamacpp_memory import read_buffers

GIB = 1 << 30

# vllm/entrypoints/common/startup.py:16-38 "vLLM server version %s, serving model %s";
# vllm/v1/engine/core.py:104 "Initializing a V1 LLM engine (v%s) with config"
# llama-server (startup_logs/llamacpp_b11434_cpu.log): "common_params_print_info: build 11434"
_VERSION = re.compile(
    r"vLLM server version (?P<v>[\w.+-]+)|V1 LLM engine \(v(?P<v2>[\w.+-]+)\)"
    r"|common_params_print_info: build (?P<b>\d+)"
)
# vllm/v1/worker/gpu_model_runner.py:5089 "Model loading took %s GiB memory and %.6f seconds"
_WEIGHTS = re.compile(r"Model loading took (?P<gib>[\d.]+) GiB")
# vllm/v1/worker/gpu_worker.py:772-775 "Available KV cache memory: %.2f GiB"; on the CPU (0.32,
# v1/worker/cpu_worker.py:229-256) "Explicitly set (0.12/23.54) GiB for KV cache on node 0."
# or "Auto set (…/…) GiB for KV cache": the space and the node's RAM, in GiB to two places
_KV_MEMORY = re.compile(
    r"Available KV cache memory: (?P<gib>-?[\d.]+) GiB"
    r"|(?:Explicitly|Auto) set \((?P<cpu_gib>[\d.]+)/[\d.]+\) GiB for KV cache"
)
# vllm/v1/core/kv_cache_utils.py:1136 "GPU KV cache size: %s tokens" (thousands separated); the
# pool is the device's name (0.32 kv_cache_utils.py:2327: "CPU KV cache size: 262,144 tokens")
_KV_TOKENS = re.compile(r"\b(?:GPU|CPU)(?: \+ host)? KV cache size: (?P<n>[\d,]+) tokens")
# vllm/v1/worker/gpu_model_runner.py:6517 "Graph capturing finished in %.0f secs, took %.2f GiB"
_GRAPHS = re.compile(r"Graph capturing finished in [\d.]+ secs, took (?P<gib>-?[\d.]+) GiB")
# transformers/core_model_loading.py:1831 tqdm(desc="Loading weights"): the bar's total
_TENSORS = re.compile(r"Loading weights:\s*100%\|[^|]*\|\s*(?P<n>\d+)/(?P=n)\b")
# vllm/v1/core/kv_cache_planning.py:56-85 and torch's OOM: a start refused for memory
_FAILURES = re.compile(
    r"(?:No available memory for the cache blocks"
    r"|To serve at least one request with the models?'?s max seq len"
    r"|Free memory on device \S+ \([^)]*\) on startup is less than desired"
    r"|CUDA out of memory)"
)


@dataclass(frozen=True, slots=True)
class StartFigures:
    """What one engine start printed; None where the engine did not print it (yet)."""

    engine_version: str = ""
    weights_bytes: int | None = None  # rank 0's "Model loading took"
    kv_bytes: int | None = None  # "Available KV cache memory"
    kv_tokens: int | None = None
    cuda_graph_bytes: int | None = None
    weight_tensors: int | None = None  # transformers serve: the tensors it loaded
    failure: str = ""  # the line of a start refused for memory

    @property
    def any(self) -> bool:
        return self != StartFigures(engine_version=self.engine_version)


def _gib(text: str) -> int:
    return round(float(text) * GIB)


def read_line(figures: StartFigures, line: str) -> StartFigures:
    """`figures` with what this line adds; the first of each figure wins (rank 0 logs first,
    and a second rank's line says the same of its own GPU)."""
    changes: dict[str, object] = {}
    if not figures.engine_version and (m := _VERSION.search(line)):
        changes["engine_version"] = m["v"] or m["v2"] or f"b{m['b']}"
    if figures.weights_bytes is None and (m := _WEIGHTS.search(line)):
        changes["weights_bytes"] = _gib(m["gib"])
    if figures.kv_bytes is None and (m := _KV_MEMORY.search(line)):
        changes["kv_bytes"] = _gib(m["gib"] or m["cpu_gib"])
    if figures.kv_tokens is None and (m := _KV_TOKENS.search(line)):
        changes["kv_tokens"] = int(m["n"].replace(",", ""))
    if figures.cuda_graph_bytes is None and (m := _GRAPHS.search(line)):
        changes["cuda_graph_bytes"] = _gib(m["gib"])
    if figures.weight_tensors is None and (m := _TENSORS.search(line)):
        changes["weight_tensors"] = int(m["n"])
    if not figures.failure and (m := _FAILURES.search(line)):
        changes["failure"] = line[m.start() :].strip()[:300]  # from vLLM's own words on
    return replace(figures, **changes) if changes else figures  # type: ignore[arg-type]


def read_lines(lines: Iterable[str], figures: StartFigures | None = None) -> StartFigures:
    for line in lines:
        figures = read_line(figures or StartFigures(), line)
    return figures or StartFigures()


def llamacpp_figures(text: str, figures: StartFigures) -> StartFigures:
    """llama-server's first GPU (CUDA0): its model and KV buffers; the host's if it has none."""
    buffers = read_buffers(text)
    first = min(
        (b for b in buffers if b.gpu_ordinal is not None),
        key=lambda b: b.gpu_ordinal or 0,
        default=None,
    )
    chosen = first or next(iter(buffers), None)
    if chosen is None:
        return figures
    return replace(figures, weights_bytes=chosen.model_bytes, kv_bytes=chosen.kv_bytes)
