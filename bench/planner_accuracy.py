"""Planner accuracy against real vLLM start-up logs in ../shared/planner-cases (or
$PLANNER_CASES_DIR): weights per rank, KV tokens, KV GiB and fit decisions; then the KV error
by vLLM version against the planner's margin (deployments/planning/margin.py), how many of the
real start-ups the planner calls tight, and the same errors per model family (FAMILIES).

    python bench/planner_accuracy.py [--save after.json] [--baseline before.json]

--save writes the per-family figures; --baseline prints a saved run's beside them (before/after).
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deployments.catalog.modelfiles import ModelFilesError, read_model_folder  # noqa: E402
from deployments.catalog.plan_cli import PlanCliError, run_plan  # noqa: E402
from deployments.planning import GpuMemory, ModelSpec, PlanningError  # noqa: E402
from deployments.planning.margin import band  # noqa: E402
from deployments.planning.versions import profile_for  # noqa: E402

GIB = 1 << 30
FP4 = frozenset({"mxfp4", "modelopt_fp4"})

# A case's family is the first row whose test holds for its ModelSpec; add rows for new kinds.
FAMILIES: tuple[tuple[str, Callable[[ModelSpec], bool]], ...] = (
    ("VLM", lambda s: s.vision_parameters > 0),
    ("MXFP4/NVFP4", lambda s: s.quant is not None and (s.quant.method in FP4 or _nvfp4(s))),
    ("MLA", lambda s: s.mla is not None),
    ("sliding window", lambda s: any(s.sliding_layers)),
    ("MoE", lambda s: s.moe is not None),
    ("dense", lambda s: True),
)


def _nvfp4(spec: ModelSpec) -> bool:
    q = spec.quant
    return q is not None and q.weight_bits == 4 and q.tensor_scale_bytes > 0


def family(folder: Path) -> str:
    try:
        config, summary = read_model_folder(folder)
        spec = ModelSpec.from_config(config, safetensors=summary)
    except (ModelFilesError, PlanningError):
        return "unreadable"
    return next(name for name, test in FAMILIES if test(spec))


def cases_dir() -> Path:
    return Path(os.environ.get("PLANNER_CASES_DIR") or ROOT.parent / "shared" / "planner-cases")


def options(row: dict[str, str], models: Path) -> dict[str, Any]:
    tp, pp = int(row["tp"]), int(row["pp"])
    return {
        "model": str(models / row["model"]),
        "gpus": f"{tp * pp}x{row['gpu_gib']}GiB",
        "tp": tp,
        "pp": pp,
        "dtype": row["dtype"] or "auto",
        "quantization": row["quantization"] or None,
        "kv_cache_dtype": row["kv_cache_dtype"] or "auto",
        "max_model_len": int(row["max_model_len"]),
        "gpu_memory_utilization": float(row["gmu"]),
        "block_size": int(row["block_size"]) if row["block_size"] else None,
        "vllm_version": row["vllm_version"],
        "json": True,
    }


def predict(row: dict[str, str], models: Path) -> dict[str, Any] | None:
    try:
        return json.loads(run_plan(options(row, models)))["plans"][0]
    except PlanCliError:
        return None


def main(argv: list[str]) -> int:
    root = cases_dir()
    with (root / "cases.tsv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    w_err, t_err, kv_err, agree = [], [], [], 0
    by_version: dict[str, list[tuple[float, float]]] = {}
    by_family: dict[str, dict[str, list[float]]] = {}
    tight = 0
    for row in rows:
        plan = predict(row, root / "models")
        fits = bool(plan and plan["fits"])
        ok = row["expect_status"] == "ok"
        agree += fits == ok
        fam = by_family.setdefault(family(root / "models" / row["model"]), _empty_family())
        fam["agree"].append(float(fits == ok))
        line = f"{row['obs_id']:<12} expect={row['expect_status']:<6} fits={fits!s:<5}"
        if ok and plan:
            gpu = plan["per_gpu"][0]
            w, t = gpu["weights_bytes"] / GIB, plan["kv_cache_tokens"]
            w_err.append(abs(w - float(row["weights_gib"])) / float(row["weights_gib"]))
            t_err.append(abs(t - int(row["kv_tokens"])) / int(row["kv_tokens"]))
            kv_err.append(abs(gpu["kv_cache_bytes"] / GIB - float(row["kv_gib"])))
            signed = gpu["kv_cache_bytes"] / GIB - float(row["kv_gib"])
            by_version.setdefault(row["vllm_version"], []).append((signed, margin_gib(row, gpu)))
            tight += bool(plan["tight"])
            fam["weights"].append(w_err[-1])
            fam["kv_tokens"].append(t_err[-1])
            line += f" weights {w:.3f}/{row['weights_gib']} GiB  kv tokens {t}/{row['kv_tokens']}"
        print(line)
    report(len(rows), w_err, t_err, kv_err, agree)
    report_margin(by_version, tight)
    figures = {name: _summary(f) for name, f in sorted(by_family.items())}
    report_families(figures, _load(_option(argv, "--baseline")))
    if saved := _option(argv, "--save"):
        Path(saved).write_text(json.dumps(figures, indent=1), encoding="utf-8")
    return 0


def _empty_family() -> dict[str, list[float]]:
    return {"agree": [], "weights": [], "kv_tokens": []}


def _summary(f: dict[str, list[float]]) -> dict[str, float]:
    def mean(xs: list[float]) -> float:
        return 100 * sum(xs) / len(xs) if xs else 0.0

    return {
        "cases": len(f["agree"]),
        "started": len(f["weights"]),
        "weights_mean_pct": round(mean(f["weights"]), 3),
        "weights_worst_pct": round(100 * max(f["weights"], default=0.0), 3),
        "kv_tokens_mean_pct": round(mean(f["kv_tokens"]), 3),
        "kv_tokens_worst_pct": round(100 * max(f["kv_tokens"], default=0.0), 3),
        "fit_agree_pct": round(mean(f["agree"]), 1),
    }


def report_families(figures: dict[str, dict[str, float]], before: dict[str, Any]) -> None:
    print("per family (mean/worst abs error; [before] from --baseline):")
    print(f"  {'family':<15} cases  weights %        KV tokens %      fit decisions")
    for name, now in figures.items():
        line = (
            f"  {name:<15} {now['cases']:>5}  "
            f"{now['weights_mean_pct']:>6.3f}/{now['weights_worst_pct']:<8.3f} "
            f"{now['kv_tokens_mean_pct']:>6.3f}/{now['kv_tokens_worst_pct']:<8.3f} "
            f"{now['fit_agree_pct']:>5.1f} %"
        )
        if name in before:
            b = before[name]
            line += (
                f"   [{b['weights_mean_pct']:.3f}/{b['weights_worst_pct']:.3f} "
                f"{b['kv_tokens_mean_pct']:.3f}/{b['kv_tokens_worst_pct']:.3f} "
                f"{b['fit_agree_pct']:.1f} %]"
            )
        print(line)
    for name in (n for n, _ in FAMILIES if n not in figures):
        print(f"  {name:<15}     0  (no public case of this family)")


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1] if name in argv[:-1] else ""


def _load(path: str) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8")) if path else {}


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


def report(n: int, w: list[float], t: list[float], kv: list[float], agree: int) -> None:
    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    print(f"cases: {n} ({len(w)} started)")
    print(f"weights per rank: mean abs error {100 * mean(w):.3f} %, worst {100 * max(w):.3f} %")
    print(f"KV tokens:        mean abs error {100 * mean(t):.3f} %, worst {100 * max(t):.3f} %")
    print(f"KV cache memory:  mean abs error {mean(kv):.3f} GiB, worst {max(kv):.3f} GiB")
    print(f"fit decisions:    {agree}/{n} agree ({100 * agree / n:.1f} %)")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
