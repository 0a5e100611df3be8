"""A simulated host runs its engines on the CPU (vLLM's CPU build, transformers, llama.cpp): its
host worker downloads a Hub model first, which is sensible only for small ones (the demo-sized
models the tests and laptops use)."""

from __future__ import annotations

from deployments import planning

CPU_HUB_MAX_WEIGHTS_BYTES = 2 << 30
SIMULATED_HUB = (
    "This host's GPUs are simulated: it serves local models only, or Hub models of at most "
    f"{CPU_HUB_MAX_WEIGHTS_BYTES >> 30} GiB of weights, which its engines run on the CPU."
)


def refusal(plan: planning.Plan) -> str | None:
    """Why this Hub model is too big for a simulated host, or None."""
    weights = sum(g.weights_bytes for g in plan.per_gpu)
    if weights <= CPU_HUB_MAX_WEIGHTS_BYTES:
        return None
    return (
        f"{SIMULATED_HUB} This one has {weights / (1 << 30):.2f} GiB: pick a local model "
        "(such as the demo model) or a real GPU host."
    )
