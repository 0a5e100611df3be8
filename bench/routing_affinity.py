"""Prefix-affinity routing on a synthetic shared-prefix trace: least loaded, pure affinity,
bounded-load affinity (playground.gateway.routing, the gateway's rule) and a model of
vllm-router's cache_aware rule, side by side on the same trace.

A discrete-event simulation (no network, no engines; seeded, so repeatable): Poisson arrivals,
each prompt = one of G shared headers (Zipf popularity: a few hot system prompts, a long tail)
+ a unique question. Each replica runs at most SLOTS requests at once (continuous batching),
queueing the rest, and keeps the last CACHE headers it prefilled (LRU, vLLM's prefix cache):
a request whose header is cached skips its prefill. Printed per policy: the affinity hit rate
(requests finding their header cached on the replica chosen), the mean of max/mean in-flight
across replicas sampled at each arrival, the peak in-flight of one replica, and the mean and
p90 latency.

vllm-router (PyPI 0.1.17) is a Rust HTTP router; its `cache_aware` rule is modelled here from
its documented behaviour and CLI defaults (router_args.py): when (max − min load) >
balance_abs_threshold and max > min × balance_rel_threshold, the shortest queue; otherwise the
worker whose prefix tree matches the prompt best if the match rate passes cache_threshold,
else the worker with the smallest tree. The tree is modelled as the set of prompts it routed
(match rate = the longest common prefix with any of them / the prompt's length). This is a
model of the rule, not the binary.

    .venv/bin/python bench/routing_affinity.py [--replicas 4] [--requests 20000] [--load 0.8]
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.gateway import routing  # pure: no Django needed

HEADER_CHARS = 2000
SLOTS = 8
CACHE = 8  # headers a replica's prefix cache holds
PREFILL_S = 0.40  # a 2000-character header's prefill, uncached
DECODE_S = 0.60  # the answer's decode (cached or not)


@dataclass
class Replica:
    rid: int
    running: int = 0
    queue: list[tuple[float, float]] = field(default_factory=list)  # (arrival, service)
    cache: OrderedDict[int, None] = field(default_factory=OrderedDict)
    tree: dict[int, set[str]] = field(default_factory=dict)  # header → suffixes seen

    @property
    def load(self) -> int:
        return self.running + len(self.queue)


@dataclass(frozen=True)
class Request:
    at_s: float
    header: int
    suffix: str

    def prompt_head(self) -> str:
        return f"H{self.header:04d}:" + "x" * (HEADER_CHARS - 6)


Policy = Callable[[Request, list[Replica]], int]


def trace(n: int, groups: int, rate: float, seed: int) -> list[Request]:
    rng = random.Random(seed)
    weights = [1 / (k + 1) ** 1.1 for k in range(groups)]
    at, out = 0.0, []
    for i in range(n):
        at += rng.expovariate(rate)
        header = rng.choices(range(groups), weights)[0]
        out.append(Request(at, header, f"q{i}"))
    return out


def least_loaded(req: Request, reps: list[Replica]) -> int:
    return min(
        range(len(reps)), key=lambda i: (reps[i].load, (i + int(req.suffix[1:])) % len(reps))
    )


def _order(req: Request, reps: list[Replica]) -> list[int]:
    body = {"prompt": req.prompt_head() + req.suffix}
    return routing.preference(routing.prefix_key(body), [r.rid for r in reps])


def pure_affinity(req: Request, reps: list[Replica]) -> int:
    return _order(req, reps)[0]


def bounded(factor: float) -> Policy:
    def pick(req: Request, reps: list[Replica]) -> int:
        choice = routing.choose([r.load for r in reps], _order(req, reps), factor=factor)
        assert choice is not None
        return choice.index

    return pick


def cache_aware(
    threshold: float = 0.3, abs_threshold: int = 64, rel_threshold: float = 1.5
) -> Policy:
    def pick(req: Request, reps: list[Replica]) -> int:
        loads = [r.load for r in reps]
        hi, lo = max(loads), min(loads)
        if hi - lo > abs_threshold and hi > lo * rel_threshold:
            return loads.index(lo)
        total = HEADER_CHARS + len(req.suffix)
        rates = [(HEADER_CHARS if req.header in r.tree else 0) / total for r in reps]
        best = max(range(len(reps)), key=lambda i: rates[i])
        if rates[best] > threshold:
            return best
        return min(range(len(reps)), key=lambda i: sum(len(s) for s in reps[i].tree.values()))

    return pick


@dataclass(frozen=True)
class Figures:
    hit_rate: float
    imbalance: float  # mean over arrivals of max / mean in flight
    peak: int
    mean_s: float
    p90_s: float


def simulate(requests: list[Request], replicas: int, policy: Policy) -> Figures:
    reps = [Replica(100 + i) for i in range(replicas)]
    done: list[tuple[float, int]] = []  # (finish time, replica index)
    latencies: list[float] = []
    hits = 0
    ratios: list[float] = []
    peak = 0

    def start(i: int, now: float, arrival: float, service: float) -> None:
        reps[i].running += 1
        heapq.heappush(done, (now + service, i))
        latencies.append(now + service - arrival)

    def finish_until(t: float) -> None:
        while done and done[0][0] <= t:
            when, i = heapq.heappop(done)
            reps[i].running -= 1
            if reps[i].queue:
                arrival, service = reps[i].queue.pop(0)
                start(i, when, arrival, service)

    for req in requests:
        finish_until(req.at_s)
        loads = [r.load for r in reps]
        mean = sum(loads) / len(loads)
        if mean:
            ratios.append(max(loads) / mean)
        i = policy(req, reps)
        rep = reps[i]
        hit = req.header in rep.cache
        hits += hit
        rep.cache[req.header] = None
        rep.cache.move_to_end(req.header)
        while len(rep.cache) > CACHE:
            rep.cache.popitem(last=False)
        rep.tree.setdefault(req.header, set()).add(req.suffix)
        service = DECODE_S + (0 if hit else PREFILL_S)
        if rep.running < SLOTS:
            start(i, req.at_s, req.at_s, service)
        else:
            rep.queue.append((req.at_s, service))
        peak = max(peak, rep.load)
    finish_until(float("inf"))
    latencies.sort()
    return Figures(
        hit_rate=hits / len(requests),
        imbalance=statistics.fmean(ratios) if ratios else 1.0,
        peak=peak,
        mean_s=statistics.fmean(latencies),
        p90_s=latencies[int(0.9 * len(latencies))],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument(
        "--load", type=float, default=0.8, help="offered load / capacity (uncached)"
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    capacity_rps = args.replicas * SLOTS / (DECODE_S + PREFILL_S)
    requests = trace(args.requests, args.groups, args.load * capacity_rps, args.seed)
    policies: dict[str, Policy] = {
        "least loaded": least_loaded,
        "pure affinity (rendezvous)": pure_affinity,
        "bounded affinity c=1.25 (gateway)": bounded(1.25),
        "bounded affinity c=2": bounded(2.0),
        "vllm-router cache_aware (model)": cache_aware(),
    }
    print(
        f"{args.replicas} replicas × {SLOTS} slots, {args.requests} requests, {args.groups} "
        f"headers (Zipf 1.1), load {args.load:.2f} of uncached capacity, cache {CACHE} headers"
    )
    print(f"{'policy':36} {'hit rate':>8} {'max/mean':>8} {'peak':>5} {'mean s':>7} {'p90 s':>7}")
    for name, policy in policies.items():
        f = simulate(requests, args.replicas, policy)
        print(
            f"{name:36} {f.hit_rate:8.1%} {f.imbalance:8.2f} {f.peak:5d} "
            f"{f.mean_s:7.2f} {f.p90_s:7.2f}"
        )


if __name__ == "__main__":
    main()
