"""Inventory: hosts, their GPUs and the links between them (nvidia-smi topo vocabulary), and
each host's CPU (the device vLLM's CPU build runs on)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from deployments.planning.errors import InventorySpecError
from deployments.planning.units import GIB

# best first; "NET" is the host-to-host link
LINK_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS", "NET")
SPEC_LINKS = {"nvlink": "NV18", "pcie": "PXB", "pix": "PIX", "sys": "SYS", "node": "NODE"}
UNITS = {"gib": GIB, "gb": 10**9, "mib": 1 << 20, "mb": 10**6, "tib": 1 << 40, "tb": 10**12}
MAX_GPUS = 4096  # in all, over every host of a --gpus spec
MAX_GPUS_PER_HOST = 64
MAX_GPU_BYTES = 16 << 40
# bounded digits: int() of a huge count, or float() of a huge size, is no error message
TERM = re.compile(
    r"\s*(\d{1,7})\s*[x×]\s*(?:(\d{1,7})\s*[x×]\s*)?([0-9]{0,12}\.?[0-9]{1,12})\s*([a-zA-Z]{0,8})"
    r"\s*(?:@\s*(\w{1,16}))?\s*"
)


@dataclass(frozen=True, slots=True)
class Gpu:
    """One device as the host worker registered it."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    busy: bool = False


@dataclass(frozen=True, slots=True)
class Cpu:
    """A host's CPU and RAM as its worker registered them: a device vLLM plans on by device
    "cpu" (search/cpu.py). ``cores`` are the logical CPUs the worker may use (its affinity);
    ``core_ids`` their ids when not 0..cores-1, ranks being bound to runs of them; ``isa`` the
    instruction-set flags of /proc/cpuinfo that vLLM's CPU kernels branch on ("avx2",
    "avx512f", "avx512_bf16", "amx_tile", ...); ``arch`` is ``platform.machine()``."""

    name: str
    cores: int
    total_bytes: int
    free_bytes: int
    numa_nodes: int = 1
    isa: tuple[str, ...] = ()
    arch: str = "x86_64"
    core_ids: tuple[int, ...] = ()
    index: int = 0  # the device slot the plan names (the CPU row's index on its host)
    busy: bool = False

    @property
    def cpu_ids(self) -> tuple[int, ...]:
        """The logical CPU ids ranks may be bound to, in order."""
        return self.core_ids or tuple(range(self.cores))


@dataclass(frozen=True, slots=True)
class Host:
    """A machine, its GPUs, and ``links[(a, b)]`` = "NV12", "PIX", "PXB", "PHB", "NODE" or "SYS";
    ``cpu`` is its CPU as a device (None: not registered, or not offered)."""

    name: str
    gpus: tuple[Gpu, ...]
    links: dict[tuple[int, int], str] = field(default_factory=dict, hash=False)
    cpu: Cpu | None = None

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


CPU_TERM = re.compile(
    r"\s*(\d{1,4})\s*[x×]\s*([0-9]{0,12}\.?[0-9]{1,12})\s*([a-zA-Z]{0,8})\s*(?:@\s*(\d{1,2}))?\s*"
)
MAX_CPU_BYTES = 64 << 40


def parse_cpu(spec: str, *, host: str = "local") -> Inventory:
    """A what-if CPU: ``CORESxRAM[@NUMA]`` (``8x64GiB``, ``64x512GiB@2``), all its RAM free,
    on one host without GPUs."""
    m = CPU_TERM.fullmatch(spec)
    if not m:
        raise InventorySpecError(
            f"unreadable CPU {spec.strip()!r} (expected CORESxRAM, e.g. 8x64GiB or 64x512GiB@2 "
            "for two NUMA nodes)"
        )
    cores, unit, numa = int(m[1]), (m[3] or "GiB"), int(m[4] or 1)
    if unit.lower() not in UNITS:
        raise InventorySpecError(f"unknown unit {unit!r} in CPU {spec.strip()!r}")
    total = round(float(m[2]) * UNITS[unit.lower()])
    if cores < 1 or not 0 < total <= MAX_CPU_BYTES or not 1 <= numa <= cores:
        raise InventorySpecError(
            f"CPU {spec.strip()!r}: at least one core, at most one NUMA node a core, and more "
            "than 0 and at most 64 TiB of RAM"
        )
    cpu = Cpu(f"what-if CPU {m[1]}x{m[2]}{unit}", cores, total, total, numa_nodes=numa)
    return Inventory((Host(host, (), cpu=cpu),))


@lru_cache(maxsize=256)
def link_rank(link: str) -> int:
    """0 for NVLink (more links better via a fraction), up to 6 for host-to-host."""
    kind = link.upper()
    if kind.startswith("NV"):
        return 0
    prefix = next((p for p in LINK_ORDER if kind.startswith(p)), "SYS")
    return LINK_ORDER.index(prefix)


def parse_gpus(spec: str, *, host: str = "local", name: str = "") -> Inventory:
    """Comma-separated terms: ``NxSIZE[@link]`` is N GPUs on one host (``4x80GiB``,
    ``8x80GiB@pcie``), ``HxGxSIZE[@link]`` is H hosts of G GPUs each
    (``16x8x80GiB@nvlink,4x4x48GiB@pcie``). A lone host is named ``host``; several are
    ``host-1``, ``host-2``, … in the order written."""
    terms = [_term(t) for t in spec.split(",")]
    total = sum(t.hosts * t.per_host for t in terms)
    if total > MAX_GPUS:
        raise InventorySpecError(f"--gpus {spec!r} describes {total:,} GPUs; at most {MAX_GPUS:,}")
    count = sum(t.hosts for t in terms)
    names = iter([host] if count == 1 else [f"{host}-{i}" for i in range(1, count + 1)])
    return Inventory(tuple(h for t in terms for h in t.build(names, name)))


@dataclass(frozen=True, slots=True)
class _Term:
    """One ``HxGxSIZE@link`` term of a ``--gpus`` spec."""

    hosts: int
    per_host: int
    total_bytes: int
    label: str  # "80GiB", as written
    link: str

    def build(self, names: Iterator[str], name: str) -> list[Host]:
        gpus = tuple(
            Gpu(i, name or f"GPU {self.label}", self.total_bytes, self.total_bytes)
            for i in range(self.per_host)
        )
        n = self.per_host
        links = {(a, b): self.link for a in range(n) for b in range(a + 1, n)}  # shared: frozen
        return [Host(next(names), gpus, links) for _ in range(self.hosts)]


def _term(text: str) -> _Term:
    m = TERM.fullmatch(text)
    if not m:
        raise InventorySpecError(
            f"unreadable --gpus term {text.strip()!r} (expected e.g. 4x80GiB@nvlink, or "
            "16x8x80GiB@nvlink for 16 hosts of 8 GPUs)"
        )
    hosts, per_host = (int(m[1]), int(m[2])) if m[2] else (1, int(m[1]))
    size, unit, link = float(m[3]), (m[4] or "GiB"), (m[5] or "nvlink")
    if unit.lower() not in UNITS:
        raise InventorySpecError(f"unknown unit {unit!r} in --gpus term {text.strip()!r}")
    if link.lower() not in SPEC_LINKS:
        known = ", ".join(SPEC_LINKS)
        raise InventorySpecError(f"unknown link {link!r} in --gpus (known: {known})")
    if hosts == 0 or per_host == 0:
        raise InventorySpecError(f"--gpus term {text.strip()!r} needs at least one GPU")
    if per_host > MAX_GPUS_PER_HOST:
        raise InventorySpecError(
            f"--gpus term {text.strip()!r} puts {per_host:,} GPUs on one host; at most "
            f"{MAX_GPUS_PER_HOST} (write HOSTSxGPUSxSIZE for several hosts)"
        )
    total = round(size * UNITS[unit.lower()])
    if not 0 < total <= MAX_GPU_BYTES:
        raise InventorySpecError(
            f"--gpus term {text.strip()!r}: a GPU holds more than 0 and at most 16 TiB"
        )
    return _Term(hosts, per_host, total, f"{size:g}{unit}", SPEC_LINKS[link.lower()])
