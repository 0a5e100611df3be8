"""The fleet's starts as planner cases, in the one case format (``catalog.case_format``: the
shared ``planner-cases/cases.tsv`` columns and the optional ones after them), so an operator
can hand them back and bench/planner_accuracy.py plans them as it plans the others."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from deployments.catalog.case_format import COLUMNS, field_text
from deployments.models import Engine, StartObservation
from deployments.planning.units import GIB

__all__ = ["COLUMNS", "case", "case_lines"]


def _gib(value: int | None) -> str:
    return "" if value is None else f"{value / GIB:.2f}"


def case(row: StartObservation) -> dict[str, object]:
    note = row.failure
    if row.engine != Engine.VLLM:  # the version column then holds that engine's version
        note = f"engine {row.engine} {row.engine_version}; {note}".rstrip("; ")
    cpu = not row.gpu_model and not row.gpu_total_bytes  # a start on a host's CPU
    return {
        "obs_id": f"SB-{row.deployment_id}-{row.attempt}",
        "model": row.model_ref.replace("/", "__"),
        "tp": row.tensor_parallel_size,
        "pp": row.pipeline_parallel_size,
        "dtype": row.dtype,
        "quantization": row.quantization,
        "kv_cache_dtype": row.kv_cache_dtype,
        "max_model_len": row.max_model_len,
        # NVML's total, which the host registered; vLLM logs torch's, a little smaller on some
        # cards (79.19 against NVML's 79.65 GiB on an H100 80GB): the planner's budget moves
        # by under 0.6 % of gmu × total.
        "gpu_gib": _gib(row.gpu_total_bytes or None),
        "gmu": None if cpu else row.gpu_memory_utilization,
        "block_size": row.block_size,
        "vllm_version": row.engine_version,
        "expect_status": row.outcome,
        "weights_gib": _gib(row.measured_weights_bytes),
        "kv_tokens": row.measured_kv_tokens,
        "kv_gib": _gib(row.measured_kv_bytes),
        "note": note,
        "device": "cpu" if cpu else "",
        # on the CPU the KV space is given ("Explicitly set (x/y) GiB for KV cache")
        "kv_cache_memory_bytes": row.measured_kv_bytes if cpu else None,
    }


def case_lines(rows: Iterable[StartObservation]) -> Iterator[str]:
    yield "\t".join(COLUMNS)
    for row in rows:
        fields = case(row)
        yield "\t".join(field_text(fields.get(c)) for c in COLUMNS)
