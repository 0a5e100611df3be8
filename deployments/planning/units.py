"""Byte units and dtype sizes shared by the planner modules."""

from __future__ import annotations

from .errors import PlanningError

GIB = 1 << 30
MIB = 1 << 20

DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "int8": 1,
    "uint8": 1,
}

CANONICAL_DTYPE: dict[str, str] = {
    "float32": "float32",
    "float": "float32",
    "fp32": "float32",
    "float16": "float16",
    "half": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}


def canonical_dtype(name: str) -> str:
    """Map any spelling of a 16/32-bit float dtype to float32, float16 or bfloat16."""
    key = name.lower().removeprefix("torch.")
    if key not in CANONICAL_DTYPE:
        raise PlanningError(f"unknown dtype {name!r} (expected float32, float16 or bfloat16)")
    return CANONICAL_DTYPE[key]


def dtype_bytes(name: str) -> int:
    """Bytes per element of a dtype name as vLLM spells it."""
    key = name.lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise PlanningError(f"unknown dtype {name!r}")
    return DTYPE_BYTES[key]


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)


def gib(n_bytes: int) -> float:
    """Bytes as GiB (2**30), for messages."""
    return n_bytes / GIB
