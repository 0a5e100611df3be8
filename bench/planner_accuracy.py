"""Planner accuracy against real vLLM start-up logs in ../shared/planner-cases (or
$PLANNER_CASES_DIR): weights per rank, KV tokens, KV GiB and fit decisions, overall and per
model family (dense, MoE, MLA, hybrid, sliding window, MXFP4/NVFP4, VLM); then the KV error
by vLLM version against the planner's margin (deployments/planning/search/margin.py), and how many
of the real start-ups the planner calls tight. Last, the llama.cpp (GGUF) cases: weights, KV,
compute and output buffers against llama-server's own logged lines (bench/gguf_accuracy.py's
start-ups: recorded ones re-planned, or ``--gguf-live`` to start llama-server for each again).

    .venv/bin/python bench/planner_accuracy.py [--gguf-live]"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deployments.catalog.case_format import plan_options, read_cases  # noqa: E402
from deployments.catalog.modelfiles import ModelFilesError  # noqa: E402
from deployments.catalog.plan_cli import PlanCliError, load_model, run_plan  # noqa: E402
from deployments.planning import (  # noqa: E402
    Cpu,
    GpuMemory,
    Host,
    Inventory,
    PlanningError,
    PlanRequest,
    plan,
    result_to_json,
)
from deployments.planning.memory.versions import profile_for  # noqa: E402
from deployments.planning.model.families import FAMILIES, model_family  # noqa: E402
from deployments.planning.search.margin import band  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gguf_accuracy  # noqa: E402

GIB = 1 << 30


def cases_dir() -> Path:
    return Path(os.environ.get("PLANNER_CASES_DIR") or ROOT.parent / "shared" / "planner-cases")


def predict(row: dict[str, str], models: Path) -> dict[str, Any] | None:
    """The planner's first plan for this case as it was started; None if it refused."""
    if row.get("device") == "cpu":
        return predict_cpu(row, models)
    try:
        return json.loads(run_plan(plan_options(row, models)))["plans"][0]
    except PlanCliError:
        return None


# The machine the generated CPU cases ran on (bench/kv_groundtruth.py): AVX2, no AVX-512.
CASE_CPU_ISA = ("avx2",)


def predict_cpu(row: dict[str, str], models: Path) -> dict[str, Any] | None:
    """A start of vLLM's CPU build: its CPU (the RAM vLLM logged, in ``gpu_gib``), the KV space
    it was given, planned through ``planning.plan`` as the panel plans a CPU."""
    opts = plan_options(row, models)
    ram = round(float(row["gpu_gib"] or 0) * GIB) or 64 * GIB
    cpu = Cpu("case CPU", cores=max(2, opts["tp"]), total_bytes=ram, free_bytes=ram,
              isa=CASE_CPU_ISA)  # fmt: skip
    request = PlanRequest(
        device="cpu",
        tensor_parallel_size=opts["tp"],
        dtype=opts["dtype"],
        kv_cache_dtype=opts["kv_cache_dtype"],
        max_model_len=opts["max_model_len"],
        max_num_batched_tokens=opts["max_num_batched_tokens"],
        block_size=opts["block_size"],
        kv_cache_bytes=opts["kv_cache_memory_bytes"],
        enforce_eager=opts["enforce_eager"],
        vllm_version=opts["vllm_version"],
    )
    try:
        result = plan(load_model(opts["model"]), Inventory((Host("case", (), cpu=cpu),)), request)
    except (PlanningError, ModelFilesError):
        return None
    return result_to_json(result)["plans"][0] if result.plans else None


PROJECT_CASES = ROOT / "tests" / "deployments" / "planning" / "fixtures" / "cases"


def main() -> int:
    evaluate(cases_dir(), empty="no public case")
    print()
    print(f"project cases ({PROJECT_CASES.relative_to(ROOT)}: cited start-ups, see its README):")
    evaluate(PROJECT_CASES, empty="no case")
    print()
    evaluate_cpu(CPU_CASES)
    print()
    return 0 if evaluate_gguf(live="--gguf-live" in sys.argv) else 2


CPU_CASES = ROOT / "tests" / "deployments" / "planning" / "fixtures" / "cpu_cases"


def evaluate_cpu(root: Path) -> None:
    """bench/kv_groundtruth.py's starts of the CPU vLLM on shape-true tiny models: KV tokens
    and concurrency against the logged figures, per family (the note's first words)."""
    rows = read_cases(root)
    print(f"generated CPU cases ({root.relative_to(ROOT)}; vLLM 0.32 CPU, {len(rows)} starts):")
    fams: dict[str, list[int]] = {}  # family -> [cases, fits agree, started, exact, 1 block]
    for row in rows:
        best = predict(row, root / "models")
        fits, ok = bool(best and best["fits"]), row["expect_status"] == "ok"
        fam = fams.setdefault(row["note"].split(":")[0] if ok else "refused by vLLM", [0] * 5)
        fam[0] += 1
        fam[1] += fits == ok
        if ok and best and fits:
            diff = abs(best["kv_cache_tokens"] - int(row["kv_tokens"]))
            block = max(int(b) for b in (row["block_sizes"] or "128").split(","))
            fam[2] += 1
            fam[3] += diff == 0
            fam[4] += diff <= block
    for name, (n, agree, started, exact, within) in fams.items():
        figures = f", KV tokens exact {exact}/{started}, within a block {within}/{started}"
        print(f"  {name:<28} {n} case(s): fits {agree}/{n}{figures if started else ''}")


def evaluate_gguf(*, live: bool) -> bool:
    """The llama.cpp planner's CPU figures against llama-server's logged buffers."""
    with tempfile.TemporaryDirectory() as tmp:
        if live:
            binary = gguf_accuracy.server_binary()
            if binary is None:
                print("llama.cpp cases: no llama-server (run scripts/llama.sh)")
                return False
            how = f"started now: {binary}"
            rows = [gguf_accuracy.run_case(binary, Path(tmp), c) for c in gguf_accuracy.CASES]
        else:
            how = f"recorded start-ups, {gguf_accuracy.CASES_FILE.relative_to(ROOT)}"
            rows = gguf_accuracy.recorded(Path(tmp))
    print(f"llama.cpp GGUF cases ({len(rows)}; llama-server's -lv 4 buffer lines, CPU; {how}):")
    exact = gguf_accuracy.table(rows)
    for line in gguf_accuracy.summary(rows):
        print(f"  {line}")
    print(
        "  weights and KV exact on every case held to them"
        if exact
        else "  MISMATCH in weights or KV"
    )
    return exact


def evaluate(root: Path, *, empty: str) -> None:
    """Plan every case under ``root`` and print the errors, per family and by version."""
    rows = read_cases(root)
    w_err, t_err, kv_err, agree, flagged = [], [], [], 0, 0
    by_version: dict[str, list[tuple[float, float]]] = {}
    tight = 0
    families: dict[str, Family] = {}
    for row in rows:
        best = predict(row, root / "models")
        fits = bool(best and best["fits"])
        ok = row["expect_status"] == "ok"
        agree += fits == ok
        fam = families.setdefault(family(root / "models" / row["model"]), Family())
        fam.cases += 1
        fam.agree += fits == ok
        # a failure the planner calls tight (with its reason) is flagged, though not refused
        flagged += not ok and fits and bool(best and best["tight"])
        line = f"{row['obs_id']:<12} expect={row['expect_status']:<6} fits={fits!s:<5}"
        if best and best["tight"]:
            line += " (tight)"
        if ok and best and row["weights_gib"]:
            gpu = best["per_gpu"][0]
            w, t = gpu["weights_bytes"] / GIB, best["kv_cache_tokens"]
            w_err.append(abs(w - float(row["weights_gib"])) / float(row["weights_gib"]))
            t_err.append(abs(t - int(row["kv_tokens"])) / int(row["kv_tokens"]))
            fam.weights.append(w_err[-1])
            fam.tokens.append(t_err[-1])
            kv_err.append(abs(gpu["kv_cache_bytes"] / GIB - float(row["kv_gib"])))
            signed = gpu["kv_cache_bytes"] / GIB - float(row["kv_gib"])
            by_version.setdefault(row["vllm_version"], []).append((signed, margin_gib(row, gpu)))
            tight += bool(best["tight"])
            line += f" weights {w:.3f}/{row['weights_gib']} GiB  kv tokens {t}/{row['kv_tokens']}"
        print(line)
    started = sum(r["expect_status"] == "ok" for r in rows)
    report(len(rows), started, w_err, t_err, kv_err, agree)
    if flagged:
        print(f"                  {flagged} failed start-up(s) planned as tight, with the reason")
    report_families(families, empty)
    if by_version:
        report_margin(by_version, tight)


class Family:
    """Errors of one model family's cases."""

    def __init__(self) -> None:
        self.cases = 0
        self.agree = 0
        self.weights: list[float] = []
        self.tokens: list[float] = []


def family(model_dir: Path) -> str:
    try:
        return model_family(load_model(str(model_dir)))
    except (PlanningError, ModelFilesError):
        return "unreadable"


def report_families(families: dict[str, Family], empty: str) -> None:
    print("per family (mean / worst abs error of started cases; fit decisions agreeing):")
    for name in (*FAMILIES, *(["unreadable"] if "unreadable" in families else [])):
        fam = families.get(name)
        if fam is None:
            print(f"  {name:<15} {empty}")
            continue
        if not fam.weights:
            print(
                f"  {name:<15} {fam.cases} case(s), no logged figures: fits {fam.agree}/{fam.cases}"
            )
            continue
        w, t = fam.weights or [0.0], fam.tokens or [0.0]
        print(
            f"  {name:<15} {fam.cases} case(s): weights {100 * sum(w) / len(w):.3f} % / "
            f"{100 * max(w):.3f} %, KV tokens {100 * sum(t) / len(t):.3f} % / "
            f"{100 * max(t):.3f} %, fits {fam.agree}/{fam.cases}"
        )


def margin_gib(row: dict[str, str], gpu: dict[str, int]) -> float:
    """The planner's ± on this case's predicted KV cache."""
    total = round(float(row["gpu_gib"]) * GIB)
    budget = round(total * float(row["gmu"]))
    mem = GpuMemory(0, 0, 0, gpu["cuda_graph_bytes"], 0, 0, total, budget)
    return band(profile_for(row["vllm_version"]), mem).kv_bytes / GIB


def report_margin(by_version: dict[str, list[tuple[float, float]]], tight: int) -> None:
    print("KV cache error by vLLM version (predicted - logged) against the planner's margin:")
    for version, pairs in sorted(by_version.items()):
        errors = [e for e, _ in pairs]
        worst = max(abs(e) / m for e, m in pairs)
        print(
            f"  {version:<8} {len(pairs)} start(s): {min(errors):+.3f} to {max(errors):+.3f} GiB, "
            f"margin ± {min(m for _, m in pairs):.2f}-{max(m for _, m in pairs):.2f} GiB, "
            f"worst error {100 * worst:.0f} % of it"
        )
    started = sum(len(p) for p in by_version.values())
    print(f"tight plans:      {tight}/{started} of the real start-ups")


def report(
    n: int, started: int, w: list[float], t: list[float], kv: list[float], agree: int
) -> None:
    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    print(f"cases: {n} ({started} started)")
    if w:
        print(f"weights per rank: mean abs error {100 * mean(w):.3f} %, worst {100 * max(w):.3f} %")
        print(f"KV tokens:        mean abs error {100 * mean(t):.3f} %, worst {100 * max(t):.3f} %")
        print(f"KV cache memory:  mean abs error {mean(kv):.3f} GiB, worst {max(kv):.3f} GiB")
    print(f"fit decisions:    {agree}/{n} agree ({100 * agree / n:.1f} %)")


if __name__ == "__main__":
    raise SystemExit(main())
