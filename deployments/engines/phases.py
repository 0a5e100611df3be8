"""The steps of an engine's start, recognised from its output lines. Pure: lines in, steps out.

The patterns are vLLM 0.33's, transformers 5.23's and llama-server b11434's own log strings (the
vLLM source is cited at each one; the others' from recorded starts on CPU). Steps only
move forward: a line of an earlier step seen late (vLLM's workers log in parallel) changes
nothing. The last step, ready, is not read from the log: the readiness probe decides it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOWNLOADING = "downloading"
LOADING = "loading"
PROFILING = "profiling"
CUDA_GRAPHS = "cuda_graphs"
WARMING_UP = "warming_up"
READY = "ready"
ORDER = (DOWNLOADING, LOADING, PROFILING, CUDA_GRAPHS, WARMING_UP, READY)

# A tqdm bar: "<desc>:  50% Completed | 1/2 [...]" (vLLM's _BAR_FORMAT) or "<desc>:  50%|###| 1/2".
_BAR = r":\s*(?P<pct>\d{1,3})%(?:\s*Completed\s*)?\|[^|]*?\|?\s*(?P<done>\d+)/(?P<total>\d+)"


@dataclass(frozen=True, slots=True)
class _Rule:
    phase: str
    pattern: re.Pattern[str]


# First match wins; a rule with a bar pattern also reports progress (done / total).
_RULES = (
    # vllm/v1/worker/gpu_model_runner.py:4979 "Starting to load model %s..."
    _Rule(LOADING, re.compile(r"Starting to load model ")),
    # vllm/model_executor/model_loader/weight_utils.py:1130 + _BAR_FORMAT (line 842)
    _Rule(LOADING, re.compile(r"Loading safetensors checkpoint shards(?: \(eager\))?" + _BAR)),
    _Rule(LOADING, re.compile(r"Loading (?:pt|bin|npcache) checkpoint shards" + _BAR)),
    # transformers/core_model_loading.py:1831 tqdm(desc="Loading weights"); serve logs
    # "[transformers] Loading <model>" first (cli/serving/model_manager.py:330)
    _Rule(LOADING, re.compile(r"^Loading weights" + _BAR)),
    _Rule(LOADING, re.compile(r"^\[transformers\] Loading \S")),
    # llama-server: "srv    load_model: loading model '<path>'", then "load_tensors: loading
    # model tensors, this can take a while..." (startup_logs/llamacpp_b11434_cpu.log)
    _Rule(LOADING, re.compile(r"load_model: loading model '|load_tensors: loading model tensors")),
    # llama-server: the KV cache and compute buffers are sized once the weights are in
    _Rule(PROFILING, re.compile(r"llama_context: constructing llama_context|sched_reserve: ")),
    # vllm/model_executor/model_loader/default_loader.py:507 "Loading weights took %.2f seconds",
    # vllm/v1/worker/gpu_model_runner.py:5089 "Model loading took %s GiB memory and %.6f seconds"
    _Rule(PROFILING, re.compile(r"Model loading took |Loading weights took ")),
    # vllm/v1/worker/gpu_model_runner.py:6592 tqdm(desc="Capturing CUDA graphs (…)")
    _Rule(CUDA_GRAPHS, re.compile(r"Capturing CUDA graphs(?: \([^)]*\))?" + _BAR)),
    _Rule(CUDA_GRAPHS, re.compile(r"Capturing CUDA graphs")),
    # vllm/v1/worker/gpu_model_runner.py:6517 "Graph capturing finished in %.0f secs, took %.2f GiB"
    # vllm/v1/engine/core.py:396-413 "init engine (profile, create kv cache, warmup model) took"
    # vllm/entrypoints/launchers/api_server/entry.py:139 "Starting vLLM server on %s"
    # uvicorn (both engines): "Application startup complete."
    # llama-server: "warming up the model with an empty run", then "llama_server: model loaded"
    _Rule(
        WARMING_UP,
        re.compile(
            r"Graph capturing finished in |init engine \(profile, create kv cache, warmup model\)"
            r"|Starting vLLM server on |Application startup complete\."
            r"|warming up the model with an empty run|llama_server: model loaded"
        ),
    ),
)
_STRIP = re.compile(
    r"^(?:\(\w+(?: pid=\d+)?\)\s*)?(?:INFO|WARNING|DEBUG)?\s*(?:\d\d-\d\d )?[\d:.]*\s*(?:\[[^\]]*\]\s*)?"
)


@dataclass(frozen=True, slots=True)
class Step:
    """What one line said: the step it belongs to and, for a bar, how far it is."""

    phase: str
    done: int = 0
    total: int = 0


def read_line(line: str) -> Step | None:
    """The step a line of engine output shows, or None for a line that shows none."""
    text = line.strip()
    for candidate in (text, _STRIP.sub("", text, count=1)):
        for rule in _RULES:
            match = rule.pattern.search(candidate)
            if match is None:
                continue
            if "done" in rule.pattern.groupindex:
                return Step(rule.phase, int(match["done"]), int(match["total"]))
            return Step(rule.phase)
    return None


def rank(phase: str) -> int:
    return ORDER.index(phase)


class PhaseTracker:
    """Follows one engine start: feed it lines, it tells which moved the start forward."""

    def __init__(self, current: str | None = None) -> None:
        self.current = current
        self.done = 0
        self.total = 0

    def feed(self, line: str) -> Step | None:
        """The step this line moved to or advanced (a bar's progress), else None."""
        step = read_line(line)
        if step is None:
            return None
        if self.current is not None and rank(step.phase) < rank(self.current):
            return None
        if step.phase == self.current and not step.total:
            return None
        if step.phase == self.current and (step.done, step.total) == (self.done, self.total):
            return None
        self.current, self.done, self.total = step.phase, step.done, step.total
        return step
