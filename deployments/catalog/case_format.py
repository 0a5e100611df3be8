"""The one format of planner cases: a real vLLM start and what it logged, as the shared
``planner-cases/cases.tsv`` has it (tab-separated, header row, no quoting; its README says how
to plan each), with optional columns after its seventeen. Read by bench/planner_accuracy.py
and the tests, written by bench/kv_groundtruth.py (CPU starts) and ``manage.py
export_planner_cases`` (the fleet's starts). A missing optional column reads as blank, so the
shared file, the project's cited cases and the generated ones are all the same format.

Optional columns:
- ``device``: ``gpu`` (blank) or ``cpu`` (vLLM's CPU build; ``gpu_gib`` and ``gmu`` blank);
- ``kv_cache_memory_bytes``: ``--kv-cache-memory-bytes`` given (the CPU's KV space per rank);
- ``max_num_batched_tokens``: ``--max-num-batched-tokens`` given (blank: vLLM's default);
- ``enforce_eager``: ``1`` when started with ``--enforce-eager``;
- ``concurrency``: the logged "Maximum concurrency for N tokens per request";
- ``block_sizes``: the logged KV-cache group block sizes ("kv cache group sizes", printed for
  models with more than one group), comma-separated;
- ``mamba_padding_percent``: the logged "Padding mamba page size by X%" (hybrid models);
- ``source``: where the start and its figures are written down.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

PUBLIC_COLUMNS = (
    "obs_id", "model", "tp", "pp", "dtype", "quantization", "kv_cache_dtype", "max_model_len",
    "gpu_gib", "gmu", "block_size", "vllm_version", "expect_status", "weights_gib",
    "kv_tokens", "kv_gib", "note",
)  # fmt: skip
OPTIONAL_COLUMNS = (
    "device", "kv_cache_memory_bytes", "max_num_batched_tokens", "enforce_eager",
    "concurrency", "block_sizes", "mamba_padding_percent", "source",
)  # fmt: skip
COLUMNS = PUBLIC_COLUMNS + OPTIONAL_COLUMNS
CASES_FILE = "cases.tsv"
MODELS_DIR = "models"


def read_cases(root: Path) -> list[dict[str, str]]:
    """Every case under ``root`` (its cases.tsv), each with every column (blank if absent)."""
    with (root / CASES_FILE).open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return [{c: (row.get(c) or "") for c in COLUMNS} | _extra(row) for row in rows]


def _extra(row: Mapping[str, str | None]) -> dict[str, str]:
    """Columns a file has beyond the format's (kept, never dropped)."""
    return {k: v or "" for k, v in row.items() if k and k not in COLUMNS}


def field_text(value: object) -> str:
    """A field never breaks the format: no tab, no line break (the file has no quoting)."""
    return "" if value is None else " ".join(str(value).split())


def write_cases(rows: Iterable[Mapping[str, object]], out: TextIO) -> int:
    """The header and one line per case, in the format's column order; the count written."""
    out.write("\t".join(COLUMNS) + "\n")
    n = 0
    for row in rows:
        out.write("\t".join(field_text(row.get(c)) for c in COLUMNS) + "\n")
        n += 1
    return n


def plan_options(row: Mapping[str, str], models: Path) -> dict[str, Any]:
    """The ``manage.py plan`` options that plan this case as it was started."""
    tp, pp = int(row["tp"]), int(row["pp"])
    cpu = row.get("device") == "cpu"
    return {
        "model": str(models / row["model"]),
        "gpus": None if cpu else f"{tp * pp}x{row['gpu_gib']}GiB",
        "device": "cpu" if cpu else "gpu",
        "tp": tp,
        "pp": pp,
        "dtype": row["dtype"] or "auto",
        "quantization": row["quantization"] or None,
        "kv_cache_dtype": row["kv_cache_dtype"] or "auto",
        "max_model_len": int(row["max_model_len"]),
        "gpu_memory_utilization": float(row["gmu"]) if row.get("gmu") else None,
        "block_size": int(row["block_size"]) if row["block_size"] else None,
        "max_num_batched_tokens": int(row.get("max_num_batched_tokens") or 0) or None,
        "kv_cache_memory_bytes": int(row.get("kv_cache_memory_bytes") or 0) or None,
        "enforce_eager": row.get("enforce_eager") == "1",
        "vllm_version": row["vllm_version"],
        "json": True,
    }
