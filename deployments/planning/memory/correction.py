"""A correction learned from the fleet's own start-ups, per (GPU model, vLLM version).

Every engine start records what vLLM logged beside what the plan predicted
(``StartObservation``). Where one kind of GPU under one vLLM version keeps showing the same
error, the cause is that machine's, not the model's: a driver or CUDA build holding more memory
outside PyTorch than the planner's constants, NCCL buffers of another size, a graph pool that
differs from the estimate. The web side reduces each start to one **residual**, the memory per
GPU the plan counted for the KV cache that vLLM did not have, less what the model's own weights
explain::

    residual = (planned KV bytes − logged KV bytes) − (logged weights − planned weights)

and hands the residuals here; ``learn`` turns them into a ``Correction`` the planner applies as
memory outside PyTorch on every GPU of that kind (so KV tokens, fits and margins follow).

Rules, each bounding what a handful of starts can do to a plan:

- at least ``MIN_STARTS`` starts, all erring the same way: a mixed sign is noise, not a cause;
- nothing under ``MIN_BYTES``: the planner is already within its own error there;
- at most ``CAP_FRACTION`` of the GPU (1.6 GiB of an 80 GiB card) either way, the learned
  figure stated beside the capped one: a correction this large says the model is wrong, which
  a person should look at, not the fleet paper over;
- the median, not the mean, so that one odd start does not move it;
- the tight-fit margin is then the spread the starts showed (largest minus smallest residual),
  never under the planner's floor (search/margin.py), in place of its a-priori share of the
  budget.

Pure: the caller selects the rows and computes the residuals; nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deployments.planning.units import MIB, gib

from .versions import parse_version

MIN_STARTS = 3
MIN_BYTES = 64 * MIB
CAP_FRACTION = 0.02


@dataclass(frozen=True, slots=True)
class Correction:
    """Memory per GPU to add outside PyTorch for one (GPU model, vLLM version)."""

    gpu_model: str  # as NVML names it, e.g. "NVIDIA H100 80GB HBM3"
    vllm_version: str
    outside_bytes: int  # added to the planner's memory outside PyTorch (negative: less)
    spread_bytes: int  # largest minus smallest residual of the starts
    starts: int
    learned_bytes: int  # the median before the cap (== outside_bytes when not capped)

    @property
    def capped(self) -> bool:
        return self.learned_bytes != self.outside_bytes

    def applies_to(self, gpu_name: str, version: tuple[int, int, int]) -> bool:
        return self.gpu_model == gpu_name and parse_version(self.vllm_version) == version

    def line(self) -> str:
        """What the plan says it applied."""
        more = "more" if self.outside_bytes >= 0 else "less"
        text = (
            f"learned correction applied: {gib(abs(self.outside_bytes)):.2f} GiB {more} memory "
            f"outside PyTorch per GPU for {self.gpu_model} under vLLM {self.vllm_version}, "
            f"from {self.starts} recorded starts"
        )
        if self.capped:
            text += f" (learned {gib(self.learned_bytes):+.2f} GiB, capped)"
        return f"{text}; tight-fit margin from their spread of {gib(self.spread_bytes):.2f} GiB"


def learn(
    *, gpu_model: str, vllm_version: str, gpu_total_bytes: int, residuals: Sequence[int]
) -> Correction | None:
    """The correction the starts' residuals support, or None when they show no consistent
    error (see the module note). PlanningError on a version the planner cannot read."""
    parse_version(vllm_version)
    if len(residuals) < MIN_STARTS or not gpu_model or gpu_total_bytes <= 0:
        return None
    if not (all(r > 0 for r in residuals) or all(r < 0 for r in residuals)):
        return None
    learned = _median(residuals)
    if abs(learned) < MIN_BYTES:
        return None
    cap = round(CAP_FRACTION * gpu_total_bytes)
    return Correction(
        gpu_model=gpu_model,
        vllm_version=vllm_version,
        outside_bytes=max(-cap, min(cap, learned)),
        spread_bytes=max(residuals) - min(residuals),
        starts=len(residuals),
        learned_bytes=learned,
    )


def matching(
    corrections: Sequence[Correction], gpu_name: str, version: tuple[int, int, int]
) -> Correction | None:
    """The correction for this GPU model and version, if the fleet learned one."""
    return next((c for c in corrections if c.applies_to(gpu_name, version)), None)


def _median(values: Sequence[int]) -> int:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) // 2
