"""Planning speed: one 70B model over fleets of 8-GPU hosts (NVLink islands of four, and PCIe
L40S boxes), all layouts with reasons, the pure planner without Django. Prints the growth, the
median of repeated runs and their spread, at 8, 16, 64, 256 and 1,024 GPUs. Targets: 16 GPUs
(2 hosts, mixed) <= 50 ms; 64 GPUs (8 NVLink hosts) <= 50 ms; 1,024 GPUs (128 hosts, mixed)
<= 500 ms; and under a time budget any fleet answers, the search cut short with a note."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deployments import planning  # noqa: E402

GIB = 1 << 30
LLAMA_70B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 80,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


def _config() -> dict[str, object]:
    folder = Path(os.environ.get("PLANNER_CASES_DIR") or ROOT.parent / "shared" / "planner-cases")
    path = folder / "models" / "RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic" / "config.json"
    return json.loads(path.read_text()) if path.exists() else LLAMA_70B


def nvlink_host(name: str) -> planning.Host:
    """Two NVLink islands of four (0-3, 4-7), PCIe switch pairs, sockets split 0-3 / 4-7."""
    links: dict[tuple[int, int], str] = {}
    for a in range(8):
        for b in range(a + 1, 8):
            same_island = a // 4 == b // 4
            links[a, b] = "NV12" if same_island else "SYS"
    return planning.Host(name, _gpus("H100 80GB HBM3", 80), links)


def pcie_host(name: str) -> planning.Host:
    links: dict[tuple[int, int], str] = {}
    for a in range(8):
        for b in range(a + 1, 8):
            links[a, b] = "PIX" if a // 2 == b // 2 else "NODE" if a // 4 == b // 4 else "SYS"
    return planning.Host(name, _gpus("L40S", 48), links)


def _gpus(name: str, size_gib: int) -> tuple[planning.Gpu, ...]:
    total = size_gib * GIB
    return tuple(planning.Gpu(i, name, total, total, busy=(i == 7)) for i in range(8))


def fleet(hosts: int, mixed: bool) -> planning.Inventory:
    """``hosts`` machines of 8; mixed: every other one is a PCIe L40S box."""
    build = [nvlink_host, pcie_host] if mixed else [nvlink_host]
    return planning.Inventory(tuple(build[i % len(build)](f"h{i + 1}") for i in range(hosts)))


# (GPUs, inventory, target ms or None)
SIZES = (
    (8, lambda: fleet(1, mixed=False), None),
    (16, lambda: fleet(2, mixed=True), 50.0),
    (64, lambda: fleet(8, mixed=False), 50.0),
    (256, lambda: fleet(32, mixed=True), None),
    (1024, lambda: fleet(128, mixed=True), 500.0),
)
BUDGET_S = 1.0


def timed(spec: planning.ModelSpec, inv: planning.Inventory, runs: int) -> list[float]:
    request = planning.PlanRequest(model="meta-llama/Llama-3.3-70B-Instruct")
    planning.plan(spec, inv, request)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        planning.plan(spec, inv, request, clock=time.perf_counter, deadline=start + BUDGET_S)
        times.append(time.perf_counter() - start)
    return times


def describe(spec: planning.ModelSpec, inv: planning.Inventory) -> str:
    result = planning.plan(spec, inv, planning.PlanRequest(model="m"))
    best = result.best
    fitting = sum(p.fits for p in result.plans)
    shape = f"TP={best.tensor_parallel_size} PP={best.pipeline_parallel_size} x{best.replicas}"
    where = ",".join(f"{g.host}:{g.index}" for g in best.gpus[0]) if best else "-"
    return f"{len(result.plans)} layouts ({fitting} fit), best {shape if best else '-'} on {where}"


def budget_check(spec: planning.ModelSpec) -> str:
    """The largest --gpus fleet under a budget far too short: an answer, with the note."""
    inv = planning.parse_gpus("64x64x80GiB@nvlink")
    start = time.perf_counter()
    result = planning.plan(
        spec, inv, planning.PlanRequest(), clock=time.perf_counter, deadline=start + 0.02
    )
    ms = (time.perf_counter() - start) * 1000
    return f"4,096 GPUs, 20 ms budget: answered in {ms:.1f} ms, {len(result.plans)} plans, {result.note!r}"


def main() -> int:
    spec = planning.ModelSpec.from_config(_config())
    ok = True
    print(f"{'GPUs':>5}  {'median ms':>9}  {'min-max ms':>15}  target  layouts")
    for gpus, build, target in SIZES:
        inv = build()
        times = timed(spec, inv, runs=21 if gpus <= 256 else 9)
        ms = statistics.median(times) * 1000
        spread = f"{min(times) * 1000:.1f}-{max(times) * 1000:.1f}"
        met = target is None or ms <= target
        ok &= met
        goal = f"<={target:.0f}" if target else "-"
        print(
            f"{gpus:>5}  {ms:>9.1f}  {spread:>15}  {goal:>6}{'' if met else ' MISSED'}  "
            f"{describe(spec, inv)}"
        )
    for gpus_spec in ("48x80GiB", "64x80GiB"):  # the what-if form of the issue: one wide host
        times = timed(spec, planning.parse_gpus(gpus_spec), runs=9)
        ms, low, high = (statistics.median(times) * 1000, min(times) * 1000, max(times) * 1000)
        print(f"one host, --gpus {gpus_spec}: median {ms:.1f} ms ({low:.1f}-{high:.1f})")
    print(budget_check(spec))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
