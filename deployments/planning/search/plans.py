"""What the search returns: plans (one layout each, placed on concrete GPUs) and the result."""

from __future__ import annotations

from dataclasses import dataclass

from deployments.planning.memory.layout import GpuMemory

from .engine_settings import EngineSettings


@dataclass(frozen=True, slots=True)
class GpuRef:
    """A concrete GPU: host name and device index."""

    host: str
    index: int


@dataclass(frozen=True, slots=True)
class Plan:
    """One layout: fit verdict, per-GPU memory of a replica, GPUs of every replica, the engine
    settings it relies on."""

    tensor_parallel_size: int
    pipeline_parallel_size: int
    replicas: int
    fits: bool
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    per_gpu: tuple[GpuMemory, ...]
    kv_cache_tokens: int
    max_concurrency: float
    engine_settings: EngineSettings
    gpus: tuple[tuple[GpuRef, ...], ...]  # per replica, in rank order
    max_model_len: int
    multi_host: bool = False
    link_rank: int = 0  # worst link inside a TP group (0: NVLink)
    requested_max_model_len: int = 0  # the context asked for (the model's own by default)
    # Why a fitting layout is within the planner's error band of a limit (margin.py).
    tight_reasons: tuple[str, ...] = ()
    replicas_asked: int = 0  # 0: as many as fit
    longest_fitting_len: int = 0  # the longest context vLLM would accept here, when asked more
    # "cpu": one device slot per replica (the host's CPU row) whose ``per_gpu`` entry covers
    # every rank: weights in RAM, each rank's KV space, the engine's processes.
    device: str = "gpu"

    @property
    def tight(self) -> bool:
        """Fits by the prediction, but within its error band of a limit vLLM enforces."""
        return self.fits and bool(self.tight_reasons)

    @property
    def gpus_per_replica(self) -> int:
        """TP × PP."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def context_clipped(self) -> bool:
        """Serves a shorter context than was asked for (vLLM needs ``--max-model-len`` then)."""
        return 0 < self.max_model_len < self.requested_max_model_len

    @property
    def label(self) -> str:
        """``TP 4 × PP 1`` (on a CPU: ``CPU, TP 2``)."""
        if self.device == "cpu":
            return f"CPU, TP {self.tensor_parallel_size}"
        return f"TP {self.tensor_parallel_size} × PP {self.pipeline_parallel_size}"


@dataclass(frozen=True, slots=True)
class PlanResult:
    """Plans best first (a forced ``--tp/--pp`` layout leads, fitting or not).

    ``reason`` says in one sentence why the first plan won over the runner-up.
    """

    plans: tuple[Plan, ...]
    reason: str = ""
    cut_short: bool = False  # the time budget ran out: ``plans`` are the best found until then
    note: str = ""  # "search cut short (...): ..." when ``cut_short``

    @property
    def best(self) -> Plan | None:
        """The first plan that fits, if any."""
        return next((p for p in self.plans if p.fits), None)

    @property
    def clip_offer(self) -> Plan | None:
        """A plan on fewer GPUs that serves a shorter context than asked, when one exists.

        Offered beside the chosen plan as an explicit choice ("at most N tokens on one GPU"),
        never chosen for the user while some layout serves the length asked for.
        """
        best = self.best
        if best is None or best.context_clipped:
            return None
        clipped = [p for p in self.plans if p.fits and p.context_clipped]
        cheaper = [p for p in clipped if p.gpus_per_replica < best.gpus_per_replica]
        return max(cheaper, key=lambda p: (p.max_model_len, -p.gpus_per_replica), default=None)
