"""bench/kv_groundtruth.py's recorded starts as planner cases (the one case format,
deployments/catalog/case_format.py) under tests/, and the table of logged against planned
figures (docs/planner-calibration.md). Each start's figures are read again from its own log, so
the cases carry what vLLM printed, not what the run loop kept."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kv_groundtruth_models as shapes_mod  # noqa: E402
import kv_groundtruth_run as run  # noqa: E402
from kv_groundtruth import NEEDS_TORCHVISION  # noqa: E402

from deployments.catalog.case_format import read_cases, write_cases  # noqa: E402

WORK = ROOT / "var" / "kvgt"
CASES = ROOT / "tests" / "deployments" / "planning" / "fixtures" / "cpu_cases"
VERSION = "0.32.0"
GIB = 1 << 30
MIB = 1 << 20
# cpu_worker.py:260 "Explicitly set (%s/%s) GiB for KV cache on node %d."
_NODE_TOTAL = re.compile(r"Explicitly set \([\d.]+/(?P<total>[\d.]+)\) GiB for KV cache")
SOURCE = (
    "bench/kv_groundtruth.py: vllm serve --enforce-eager --kv-cache-memory-bytes "
    "--max-model-len on vLLM 0.32.0's CPU build (scripts/vllm.sh), AVX2, 2 cores"
)


def _node_total_gib(text: str) -> str:
    m = _NODE_TOTAL.search(text)
    return m["total"] if m else ""


def case_row(key: str, result: dict[str, Any]) -> dict[str, object]:
    """One recorded start as a case row; its figures from its log."""
    log = WORK / "logs" / f"{key}.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    s = run.read_log(text) if text else run.Start(error=str(result.get("error", "")))
    name = str(result["model"])
    shape = shapes_mod.shape(name)
    ok = s.kv_tokens is not None and not s.error
    first = result.get("first_request") or ""
    note = f"{shape.family}: {shape.kept}"
    if not ok:
        note = s.error or "no KV sizing logged"
    elif first:
        note += f"; first request: {first}"
    if ok and name in NEEDS_TORCHVISION:
        note += "; vLLM started with an import-only torchvision stand-in (see the README)"
    blocks = s.group_block_sizes or []
    return {
        "obs_id": key,
        "model": name,
        "tp": 1,
        "pp": 1,
        "max_model_len": result["max_len"],
        "gpu_gib": _node_total_gib(text),  # on the CPU: the node's RAM, as vLLM logged it
        "vllm_version": VERSION,
        "expect_status": "ok" if ok else "failed",
        "kv_tokens": s.kv_tokens if ok else None,
        "kv_gib": f"{int(result['kv_bytes']) / GIB:.2f}",
        "note": note,
        "device": "cpu",
        "kv_cache_memory_bytes": result["kv_bytes"],
        "enforce_eager": 1,
        "concurrency": f"{s.concurrency:.2f}" if ok and s.concurrency is not None else None,
        "block_sizes": ",".join(str(b) for b in blocks) or None,
        "mamba_padding_percent": s.mamba_padding_percent,
        "source": SOURCE,
    }


def export(results: dict[str, dict[str, Any]]) -> None:
    """Every recorded start (in CASES order) and each model's config.json, under tests/."""
    import kv_groundtruth

    rows = []
    for name, kv_bytes, max_len in kv_groundtruth.CASES:
        key = kv_groundtruth.case_id(name, kv_bytes, max_len)
        if key in results:
            rows.append(case_row(key, results[key]))
    models = {str(r["model"]) for r in rows}
    for name in sorted(models):
        folder = CASES / "models" / name
        folder.mkdir(parents=True, exist_ok=True)
        config = shapes_mod.shape(name).config
        (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    with (CASES / "cases.tsv").open("w", encoding="utf-8") as out:
        n = write_cases(rows, out)
    print(f"{n} cases, {len(models)} models written to {CASES.relative_to(ROOT)}")


def table() -> int:
    """The markdown table: family, shape kept, KV space, logged, planned (exported cases)."""
    from planner_accuracy import predict

    print("| family | model (shape kept) | KV space | max len | logged | planned | diff |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    worst = 0
    for row in read_cases(CASES):
        shape = shapes_mod.shape(row["model"])
        best = predict(row, CASES / "models")
        space = f"{int(row['kv_cache_memory_bytes']) // MIB} MiB"
        logged = _figure(row["kv_tokens"], row["concurrency"], row["expect_status"])
        if best is None:
            planned = "refused"
        elif not best["fits"]:
            planned = "does not fit"
        else:
            planned = _figure(str(best["kv_cache_tokens"]), str(best["max_concurrency"]), "ok")
        diff = ""
        if best and best["fits"] and row["kv_tokens"]:
            d = best["kv_cache_tokens"] - int(row["kv_tokens"])
            worst = max(worst, abs(d))
            diff = f"{d:+d}"
        print(f"| {shape.family} | {row['model']} ({shape.kept}) | {space} | "
              f"{int(row['max_model_len']):,} | {logged} | {planned} | {diff} |")  # fmt: skip
    print(f"\nworst difference: {worst} tokens")
    return 0


def _figure(tokens: str, concurrency: str, status: str) -> str:
    if status != "ok" or not tokens:
        return "refused"
    return f"{int(tokens):,} ({float(concurrency):.2f}x)" if concurrency else f"{int(tokens):,}"
