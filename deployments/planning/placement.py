"""Choosing concrete GPUs: TP groups inside the best-linked set of one host, stages after."""

from __future__ import annotations

from dataclasses import dataclass

from .inventory import Gpu, Host, Inventory, link_rank


@dataclass(frozen=True, slots=True)
class TpGroup:
    """GPUs of one tensor-parallel group on one host, with its worst internal link."""

    host: Host
    gpus: tuple[Gpu, ...]
    worst_link: str

    @property
    def quality(self) -> int:
        """Rank of the worst link (0: NVLink)."""
        return link_rank(self.worst_link) if len(self.gpus) > 1 else 0


@dataclass(frozen=True, slots=True)
class Replica:
    """Pipeline stages of one replica, each a TP group."""

    stages: tuple[TpGroup, ...]

    @property
    def multi_host(self) -> bool:
        """Stages on more than one host (needs Ray)."""
        return len({g.host.name for g in self.stages}) > 1

    @property
    def gpus(self) -> tuple[tuple[str, Gpu], ...]:
        """(host, GPU) in rank order: stage-major, then TP rank."""
        return tuple((g.host.name, gpu) for g in self.stages for gpu in g.gpus)

    def stage_link(self, inventory: Inventory) -> int:
        """Rank of the worst link between consecutive stages."""
        worst = 0
        for a, b in zip(self.stages, self.stages[1:], strict=False):
            link = (
                inventory.host_link
                if a.host.name != b.host.name
                else a.host.link(a.gpus[-1].index, b.gpus[0].index)
            )
            worst = max(worst, link_rank(link))
        return worst


def tp_groups(host: Host, gpus: list[Gpu], size: int) -> list[TpGroup]:
    """Split a host's usable GPUs into disjoint groups of ``size``, best-linked first."""
    left, groups = list(gpus), []
    while len(left) >= size:
        best = min((_grow(host, left, seed, size) for seed in left), key=_group_key)
        groups.append(best)
        left = [g for g in left if g not in best.gpus]
    return groups


def _group_key(group: TpGroup) -> tuple[int, int]:
    return group.quality, group.gpus[0].index


def _grow(host: Host, pool: list[Gpu], seed: Gpu, size: int) -> TpGroup:
    chosen = [seed]
    while len(chosen) < size:
        rest = [g for g in pool if g not in chosen]
        chosen.append(min(rest, key=lambda g: (_worst(host, chosen, g), g.index)))
    chosen.sort(key=lambda g: g.index)
    worst = max(
        (host.link(a.index, b.index) for a in chosen for b in chosen if a.index < b.index),
        key=link_rank,
        default="X",
    )
    return TpGroup(host, tuple(chosen), worst)


def _worst(host: Host, chosen: list[Gpu], gpu: Gpu) -> int:
    return max(link_rank(host.link(c.index, gpu.index)) for c in chosen)


def replicas(per_host: dict[str, list[TpGroup]], stages: int, multi_host: bool) -> list[Replica]:
    """Disjoint replicas of ``stages`` TP groups: one host when possible, else across hosts."""
    pools = {name: list(groups) for name, groups in per_host.items()}
    out: list[Replica] = []
    while True:
        host = next((n for n, g in pools.items() if len(g) >= stages), None)
        if host is not None:
            out.append(Replica(tuple(pools[host][:stages])))
            pools[host] = pools[host][stages:]
            continue
        if not multi_host or sum(len(g) for g in pools.values()) < stages:
            return out
        out.append(Replica(tuple(_take_across(pools, stages))))


def _take_across(pools: dict[str, list[TpGroup]], stages: int) -> list[TpGroup]:
    taken: list[TpGroup] = []
    for name in sorted(pools, key=lambda n: -len(pools[n])):
        need = stages - len(taken)
        taken += pools[name][:need]
        pools[name] = pools[name][need:]
    return taken
