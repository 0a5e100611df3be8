"""Choosing concrete GPUs: TP groups inside the best-linked set of one host, stages after."""

from __future__ import annotations

from dataclasses import dataclass, field

from .inventory import Gpu, Host, Inventory, link_rank

Matrix = tuple[tuple[int, ...], ...]


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
        self._shapes: dict[tuple[int, int], list[tuple[tuple[int, ...], str]]] = {}
        self._links: dict[tuple[int, tuple[int, ...]], tuple[_Links, int]] = {}
        self._kinds: dict[_Links, int] = {}  # hashing a big host's links once, not per size

    def groups(self, host: Host, gpus: list[Gpu], size: int) -> list[TpGroup]:
        """``tp_groups(host, gpus, size)``, computed once per kind of host."""
        # hosts built alike share their links dict (parse_gpus); the inventory keeps it alive
        key = (id(host.links), tuple(g.index for g in gpus))
        if key not in self._links:
            links = _Links.of(host, gpus)
            self._links[key] = links, self._kinds.setdefault(links, len(self._kinds))
        links, kind = self._links[key]
        shapes = self._shapes.get((size, kind))
        if shapes is None:
            shapes = self._shapes[size, kind] = _shapes(links, size)
        return [TpGroup(host, tuple(gpus[i] for i in pos), worst) for pos, worst in shapes]


def tp_groups(host: Host, gpus: list[Gpu], size: int) -> list[TpGroup]:
    """Split a host's usable GPUs into disjoint groups of ``size``, best-linked first."""
    shapes = _shapes(_Links.of(host, gpus), size)
    return [TpGroup(host, tuple(gpus[i] for i in pos), w) for pos, w in shapes]


@dataclass(frozen=True, slots=True)
class _Links:
    """Links between a host's usable GPUs, by position: hosts alike compare equal."""

    index: tuple[int, ...]
    names: tuple[tuple[str, ...], ...]
    rank: tuple[tuple[int, ...], ...] = field(compare=False)
    uniform: bool = field(compare=False)

    @classmethod
    def of(cls, host: Host, gpus: list[Gpu]) -> _Links:
        names = tuple(tuple(host.link(a.index, b.index) for b in gpus) for a in gpus)
        rank = tuple(tuple(link_rank(x) for x in row) for row in names)
        uniform = len({x for i, row in enumerate(names) for x in row[i + 1 :]}) <= 1
        return cls(tuple(g.index for g in gpus), names, rank, uniform)


def _shapes(links: _Links, size: int) -> list[tuple[tuple[int, ...], str]]:
    """Greedy, as positions in ``gpus``: the best group (worst link, then lowest index) grown
    from each seed, taken in turn."""
    rank, index = links.rank, links.index
    if size == 1:  # no links inside: the lowest index first
        return [((i,), "X") for i in sorted(range(len(index)), key=lambda i: index[i])]
    left, out = list(range(len(index))), []
    while len(left) >= size:
        if links.uniform:  # every seed ties: the first one and the lowest indices after it
            rest = sorted(left[1:], key=lambda i: index[i])[: size - 1]
            best = tuple(sorted([left[0], *rest], key=lambda i: index[i]))
        else:
            grown = [_grow(rank, index, left, seed, size) for seed in left]
            best = min(grown, key=lambda g: (_quality(rank, g), index[g[0]]))
        out.append((best, _worst_name(links.names, rank, best)))
        taken = set(best)
        left = [i for i in left if i not in taken]
    return out


def _grow(
    rank: Matrix, index: tuple[int, ...], pool: list[int], seed: int, size: int
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


def _quality(rank: Matrix, group: tuple[int, ...]) -> int:
    return max((rank[a][b] for i, a in enumerate(group) for b in group[i + 1 :]), default=0)


def _worst_name(names: tuple[tuple[str, ...], ...], rank: Matrix, group: tuple[int, ...]) -> str:
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
