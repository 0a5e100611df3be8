"""The fleet's starts as planner cases, in the TSV format of the shared
``planner-cases/cases.tsv`` (same columns, tab-separated, header row, no quoting; its README
says how to plan each one), so an operator can hand them back."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from deployments.models import Engine, StartObservation
from deployments.planning.units import GIB

COLUMNS = (
    "obs_id", "model", "tp", "pp", "dtype", "quantization", "kv_cache_dtype", "max_model_len",
    "gpu_gib", "gmu", "block_size", "vllm_version", "expect_status", "weights_gib",
    "kv_tokens", "kv_gib", "note",
)  # fmt: skip


def _gib(value: int | None) -> str:
    return "" if value is None else f"{value / GIB:.2f}"


def _text(value: object) -> str:
    """A field never breaks the format: no tab, no line break (the file has no quoting)."""
    return "" if value is None else " ".join(str(value).split())


def case(row: StartObservation) -> tuple[str, ...]:
    note = row.failure
    if row.engine != Engine.VLLM:  # the version column then holds that engine's version
        note = f"engine {row.engine} {row.engine_version}; {note}".rstrip("; ")
    fields: tuple[object, ...] = (
        f"SB-{row.deployment_id}-{row.attempt}",
        row.model_ref.replace("/", "__"),
        row.tensor_parallel_size,
        row.pipeline_parallel_size,
        row.dtype,
        row.quantization,
        row.kv_cache_dtype,
        row.max_model_len,
        # NVML's total, which the host registered; vLLM logs torch's, a little smaller on some
        # cards (79.19 against NVML's 79.65 GiB on an H100 80GB): the planner's budget moves
        # by under 0.6 % of gmu × total.
        _gib(row.gpu_total_bytes or None),
        row.gpu_memory_utilization,
        row.block_size,
        row.engine_version,
        row.outcome,
        _gib(row.measured_weights_bytes),
        row.measured_kv_tokens,
        _gib(row.measured_kv_bytes),
        note,
    )
    return tuple(_text(f) for f in fields)


def case_lines(rows: Iterable[StartObservation]) -> Iterator[str]:
    yield "\t".join(COLUMNS)
    for row in rows:
        yield "\t".join(case(row))
