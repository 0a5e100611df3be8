"""GPU inventory: hosts, their GPUs, and the links between them (nvidia-smi topo vocabulary)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from .errors import InventorySpecError
from .units import GIB

# best first; "NET" is the host-to-host link
LINK_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS", "NET")
SPEC_LINKS = {"nvlink": "NV18", "pcie": "PXB", "pix": "PIX", "sys": "SYS", "node": "NODE"}
UNITS = {"gib": GIB, "gb": 10**9, "mib": 1 << 20, "mb": 10**6, "tib": 1 << 40, "tb": 10**12}


@dataclass(frozen=True, slots=True)
class Gpu:
    """One device as the host worker registered it."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    busy: bool = False


@dataclass(frozen=True, slots=True)
class Host:
    """A machine, its GPUs, and ``links[(a, b)]`` = "NV12", "PIX", "PXB", "PHB", "NODE" or "SYS"."""

    name: str
    gpus: tuple[Gpu, ...]
    links: dict[tuple[int, int], str] = field(default_factory=dict, hash=False)

    def link(self, a: int, b: int) -> str:
        """Link between GPU indices ``a`` and ``b`` (SYS when unknown)."""
        if a == b:
            return "X"
        return self.links.get((a, b)) or self.links.get((b, a)) or "SYS"


@dataclass(frozen=True, slots=True)
class Inventory:
    """All hosts a plan may use; ``host_link`` is how hosts reach each other."""

    hosts: tuple[Host, ...]
    host_link: str = "NET"

    @property
    def gpu_count(self) -> int:
        """All GPUs, busy or not."""
        return sum(len(h.gpus) for h in self.hosts)


@lru_cache(maxsize=256)
def link_rank(link: str) -> int:
    """0 for NVLink (more links better via a fraction), up to 6 for host-to-host."""
    kind = link.upper()
    if kind.startswith("NV"):
        return 0
    prefix = next((p for p in LINK_ORDER if kind.startswith(p)), "SYS")
    return LINK_ORDER.index(prefix)


def parse_gpus(spec: str, *, host: str = "local", name: str = "") -> Inventory:
    """``4x80GiB``, ``2x79.19GiB@nvlink``, ``8x80GiB@pcie``: N identical idle GPUs on one host."""
    m = re.fullmatch(r"\s*(\d+)\s*[x×]\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*(?:@\s*(\w+))?\s*", spec)
    if not m:
        raise InventorySpecError(f"unreadable --gpus {spec!r} (expected e.g. 4x80GiB@nvlink)")
    count, size, unit, link = int(m[1]), float(m[2]), (m[3] or "GiB").lower(), (m[4] or "nvlink")
    if unit not in UNITS or link.lower() not in SPEC_LINKS:
        raise InventorySpecError(f"unknown unit or link in --gpus {spec!r}")
    if not 0 < count <= 1024 or size <= 0:
        raise InventorySpecError(f"--gpus {spec!r} needs at least one GPU of positive size")
    total = round(size * UNITS[unit])
    gpus = tuple(Gpu(i, name or f"GPU {size:g}{m[3] or 'GiB'}", total, total) for i in range(count))
    kind = SPEC_LINKS[link.lower()]
    links = {(a, b): kind for a in range(count) for b in range(a + 1, count)}
    return Inventory((Host(host, gpus, links),))
