"""What llama-server allocated on each device, read from its own `-lv 4` start-up lines, set
beside the plan's figures per GPU. Pure: log text in, values out.

At `-lv 4` llama.cpp prints one line per backend buffer (reference llamacpp.md §3.3):
``load_tensors: CUDA0 model buffer size = 4403.49 MiB``, ``llama_kv_cache: CUDA0 KV buffer
size = 512.00 MiB``, ``sched_reserve: CUDA0 compute buffer size = 296.00 MiB``,
``llama_context: CUDA_Host output buffer size = 0.49 MiB``. The function prefix changes between
versions, so only the message is matched. As Ollama does, ``CPU*`` and ``*_Host`` buffers are
host memory and ``CUDA0_Mapped``-style suffixes belong to their base device. The values are
MiB with two decimals, so each is exact to about 5 KiB.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MIB = 1024 * 1024
HOST = "Host"
_BUFFER = re.compile(
    r"(?P<device>[A-Za-z_][A-Za-z0-9_]*)\s+(?P<kind>model|KV|compute|output|RS)\s+buffer size"
    r"\s*=\s*(?P<mib>[\d.]+)\s*MiB"
)
_GPU = re.compile(r"^(?P<base>[A-Za-z]+)(?P<index>\d+)$")
_SUFFIXES = ("_Mapped", "_REPACK", "_Private")


@dataclass(frozen=True, slots=True)
class DeviceBuffers:
    """The bytes llama.cpp allocated on one device (``CUDA0`` …, or ``Host``)."""

    device: str
    model_bytes: int = 0
    kv_bytes: int = 0  # the KV cache (and a recurrent model's RS state)
    compute_bytes: int = 0
    output_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.kv_bytes + self.compute_bytes + self.output_bytes

    @property
    def gpu_ordinal(self) -> int | None:
        """n of ``CUDAn``/``ROCmn``/``Vulkann``: the n-th visible device, None for the host."""
        match = _GPU.match(self.device)
        return int(match["index"]) if match else None


@dataclass(frozen=True, slots=True)
class MeasuredRow:
    """One leased GPU: the plan's bytes beside what llama-server said it allocated there."""

    gpu: int
    planned_weights_bytes: int
    planned_kv_bytes: int
    planned_total_bytes: int
    measured: DeviceBuffers | None  # None: no buffer line named this GPU

    @property
    def difference_bytes(self) -> int | None:
        if self.measured is None:
            return None
        return self.measured.total_bytes - self.planned_total_bytes


def device_of(name: str) -> str:
    """The device a buffer's name belongs to: ``CUDA0_Mapped`` → ``CUDA0``, ``CPU_REPACK`` and
    ``CUDA_Host`` → ``Host``."""
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name.startswith("CPU") or name.endswith("_Host"):
        return HOST
    return name


def read_buffers(log_text: str) -> tuple[DeviceBuffers, ...]:
    """Every device's buffers in the log, in the order first named. A log of several starts
    (a restart appends) counts the last start only: its first model line begins it anew."""
    totals: dict[str, dict[str, int]] = {}
    for match in _BUFFER.finditer(log_text):
        kind = {"KV": "kv", "RS": "kv"}.get(match["kind"], match["kind"])
        if kind == "model" and any(t.get("kv") for t in totals.values()):
            totals = {}  # the model of a new start follows the KV of the one before
        device = device_of(match["device"])
        amounts = totals.setdefault(device, {})
        amounts[kind] = amounts.get(kind, 0) + round(float(match["mib"]) * MIB)
    return tuple(
        DeviceBuffers(device, **{f"{kind}_bytes": n for kind, n in amounts.items()})
        for device, amounts in totals.items()
    )


def visible_order(planned: Sequence[int], leased: Sequence[int]) -> tuple[int, ...]:
    """The leased GPUs in the order CUDA_VISIBLE_DEVICES lists them, so CUDA0 is the first:
    the plan's order where it leased exactly those (its -ts shares follow it), else by index."""
    if sorted(planned) == sorted(leased):
        return tuple(planned)
    return tuple(sorted(leased))


def by_gpu(
    buffers: Sequence[DeviceBuffers], gpu_indices: Sequence[int]
) -> dict[int, DeviceBuffers]:
    """The GPU buffers by leased GPU index: ``CUDAn`` is the n-th of `gpu_indices`, as
    CUDA_VISIBLE_DEVICES lists them (CUDA_DEVICE_ORDER=PCI_BUS_ID)."""
    found = {}
    for b in buffers:
        ordinal = b.gpu_ordinal
        if ordinal is not None and ordinal < len(gpu_indices):
            found[gpu_indices[ordinal]] = b
    return found


def compare(
    planned: Mapping[int, tuple[int, int, int]],
    buffers: Sequence[DeviceBuffers],
    gpu_indices: Sequence[int],
) -> list[MeasuredRow]:
    """Rows per leased GPU; `planned` maps a GPU index to (weights, KV, total) bytes."""
    measured = by_gpu(buffers, gpu_indices)
    return [
        MeasuredRow(index, *planned.get(index, (0, 0, 0)), measured.get(index))
        for index in gpu_indices
    ]
