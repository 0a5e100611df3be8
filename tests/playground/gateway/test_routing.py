"""Prefix affinity within a load bound (playground.gateway.routing): the pure rule."""

from __future__ import annotations

from collections import Counter

import pytest

from playground.gateway import routing


def _chat(system: str, user: str) -> dict[str, object]:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def test_prompts_sharing_their_first_kilobyte_share_a_key() -> None:
    header = "You are a careful assistant. " * 60  # > PREFIX_CHARS
    assert routing.prefix_key(_chat(header, "a")) == routing.prefix_key(_chat(header, "b"))
    assert routing.prefix_key(_chat("short", "a")) != routing.prefix_key(_chat("short", "b"))
    assert routing.prefix_key({"prompt": header + "x"}) == routing.prefix_key({"prompt": header})
    assert routing.prefix_key({"prompt": [header]}) == routing.prefix_key({"prompt": header})
    assert routing.prefix_key({"prompt": [1, 2, 3]}) == ""
    assert routing.prefix_key({}) == ""


def test_preference_is_stable_and_moves_only_the_leaving_replicas_keys() -> None:
    keys = [f"k{i}" for i in range(400)]
    ids = [11, 12, 13, 14]
    before = {k: ids[routing.preference(k, ids)[0]] for k in keys}
    assert before == {k: ids[routing.preference(k, ids)[0]] for k in keys}
    assert set(Counter(before.values())) == set(ids)  # every replica is someone's home
    left = [11, 12, 14]
    after = {k: left[routing.preference(k, left)[0]] for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved and all(before[k] == 13 for k in moved)  # only 13's keys found a new home


@pytest.mark.parametrize(
    ("counts", "order", "index", "home"),
    [
        ([0, 0, 0], [2, 0, 1], 2, True),  # idle: the home
        ([2, 1, 1], [0, 1, 2], 0, True),  # bound ceil(1.25 × 5 / 3) = 3: 2 + 1 fits
        ([3, 1, 1], [0, 1, 2], 1, False),  # 3 + 1 > ceil(1.25 × 6 / 3) = 3: the next in order
        ([None, 4, 0], [0, 1, 2], 2, False),  # home out (down, draining): 4 + 1 > 3
        ([None, 0, 9], [0, 1, 2], 1, True),  # home out: the first in rotation is home
        ([None, None], [0, 1], None, None),
    ],
)
def test_choose_bounds_the_load_of_the_prefix_home(
    counts: list[int | None], order: list[int], index: int | None, home: bool | None
) -> None:
    choice = routing.choose(counts, order)
    if index is None:
        assert choice is None
    else:
        assert choice == routing.Choice(index, bool(home))


def test_without_prefix_least_loaded() -> None:
    assert routing.choose([3, 1, 2], None) == routing.Choice(1, False)


def test_a_hot_prefix_spills_over_but_no_replica_passes_the_bound() -> None:
    counts = [0, 0, 0, 0]
    order = [1, 0, 2, 3]
    for _ in range(40):  # every request has the same prefix, none finishes
        choice = routing.choose(counts, order)
        assert choice is not None
        counts[choice.index] += 1
        assert max(counts) <= routing.load_bound(sum(counts) - 1, 4, routing.LOAD_FACTOR)
    assert counts[1] == max(counts) and min(counts) > 0
