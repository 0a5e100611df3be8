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


class GroupCache:
    """TP groups of hosts alike (same usable GPU indices and links) are worked out once."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[object, ...], list[tuple[tuple[int, ...], str]]] = {}
        self._keys: dict[tuple[str, int], tuple[object, ...]] = {}

    def groups(self, host: Host, gpus: list[Gpu], size: int) -> list[TpGroup]:
        """``tp_groups(host, gpus, size)``, computed once per kind of host."""
        sig = self._keys.get((host.name, len(gpus)))
        if sig is None:
            sig = self._keys[host.name, len(gpus)] = _signature(host, gpus)
        shapes = self._shapes.get((size, *sig))
        if shapes is None:
            shapes = self._shapes[(size, *sig)] = _shapes(host, gpus, size)
        return [TpGroup(host, tuple(gpus[i] for i in pos), worst) for pos, worst in shapes]


def tp_groups(host: Host, gpus: list[Gpu], size: int) -> list[TpGroup]:
    """Split a host's usable GPUs into disjoint groups of ``size``, best-linked first."""
    return [TpGroup(host, tuple(gpus[i] for i in pos), w) for pos, w in _shapes(host, gpus, size)]


def _signature(host: Host, gpus: list[Gpu]) -> tuple[object, ...]:
    pairs = tuple(host.link(a.index, b.index) for i, a in enumerate(gpus) for b in gpus[i + 1 :])
    return tuple(g.index for g in gpus), pairs


def _shapes(host: Host, gpus: list[Gpu], size: int) -> list[tuple[tuple[int, ...], str]]:
    """Greedy, as positions in ``gpus``: the best group (worst link, then lowest index) grown
    from each seed, taken in turn. On a host whose links are all alike every seed ties, so the
    first one decides and the search is linear."""
    names = [[host.link(a.index, b.index) for b in gpus] for a in gpus]
    rank = [[link_rank(x) for x in row] for row in names]
    index = [g.index for g in gpus]
    uniform = len({x for i, row in enumerate(names) for x in row[i + 1 :]}) <= 1
    left, out = list(range(len(gpus))), []
    while len(left) >= size:
        seeds = left[:1] if uniform and size > 1 else left
        grown = [_grow(rank, index, left, seed, size) for seed in seeds]
        best = min(grown, key=lambda g: (_quality(rank, g), index[g[0]]))
        out.append((best, _worst_name(names, rank, best)))
        taken = set(best)
        left = [i for i in left if i not in taken]
    return out


def _grow(
    rank: list[list[int]], index: list[int], pool: list[int], seed: int, size: int
) -> tuple[int, ...]:
    chosen = [seed]
    worst = {c: rank[seed][c] for c in pool if c != seed}
    while len(chosen) < size:
        nxt = min(worst, key=lambda c: (worst[c], index[c]))
        chosen.append(nxt)
        del worst[nxt]
        for c in worst:
            worst[c] = max(worst[c], rank[nxt][c])
    return tuple(sorted(chosen, key=lambda c: index[c]))


def _quality(rank: list[list[int]], group: tuple[int, ...]) -> int:
    return max((rank[a][b] for i, a in enumerate(group) for b in group[i + 1 :]), default=0)


def _worst_name(names: list[list[str]], rank: list[list[int]], group: tuple[int, ...]) -> str:
    pairs = [(a, b) for i, a in enumerate(group) for b in group[i + 1 :]]
    if not pairs:
        return "X"
    a, b = max(pairs, key=lambda p: rank[p[0]][p[1]])
    return names[a][b]


def replicas(per_host: dict[str, list[TpGroup]], stages: int, multi_host: bool) -> list[Replica]:
    """Disjoint replicas of ``stages`` TP groups: one host when possible, else across hosts."""
    out: list[Replica] = []
    pools: dict[str, list[TpGroup]] = {}
    for name, groups in per_host.items():
        whole = len(groups) // stages * stages
        out += [Replica(tuple(groups[i : i + stages])) for i in range(0, whole, stages)]
        if whole < len(groups):
            pools[name] = list(groups[whole:])
    left = sum(len(g) for g in pools.values())
    while multi_host and left >= stages:
        out.append(Replica(tuple(_take_across(pools, stages))))
        left -= stages
    return out


def _take_across(pools: dict[str, list[TpGroup]], stages: int) -> list[TpGroup]:
    taken: list[TpGroup] = []
    for name in sorted(pools, key=lambda n: -len(pools[n])):
        need = stages - len(taken)
        if need == 0:
            break
        taken += pools[name][:need]
        pools[name] = pools[name][need:]
        if not pools[name]:
            del pools[name]
    return taken
