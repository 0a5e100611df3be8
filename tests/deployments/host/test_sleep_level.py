"""Which sleep level an idle vLLM engine gets, what it keeps leased, and its flags (pure)."""

from __future__ import annotations

import pytest

from deployments.engines import get_adapter
from deployments.engines.base import LaunchSpec
from deployments.engines.sleep import (
    CONTEXT_FLOOR_BYTES,
    RAM_MARGIN_BYTES,
    choose_level,
    kept_bytes,
)

GIB = 1 << 30


@pytest.mark.parametrize(
    ("weights_gib", "ram_gib", "level"),
    [
        (16, 64, 1),  # RAM holds the weights with room to spare
        (60, 64, 1),  # exactly the weights plus the margin
        (61, 64, 2),  # one GiB short of the margin
        (140, 64, 2),  # a 70B in bf16 on a 64 GiB host
    ],
)
def test_level_one_only_when_host_ram_holds_the_weights(weights_gib, ram_gib, level) -> None:
    assert RAM_MARGIN_BYTES == 4 * GIB
    choice = choose_level(weights_bytes=weights_gib * GIB, ram_available_bytes=ram_gib * GIB)
    assert choice.level == level
    assert f"level {level}" in choice.why
    if level == 2:
        assert "reloads them from disk" in choice.why


def test_a_sleeping_gpu_keeps_its_context_and_graphs_only() -> None:
    assert kept_bytes(non_torch_bytes=GIB, cuda_graph_bytes=GIB // 2, total_bytes=70 * GIB) == (
        3 * GIB // 2
    )
    # a plan without the figures keeps the floor, never more than the lease
    assert kept_bytes(non_torch_bytes=0, cuda_graph_bytes=0, total_bytes=0) == CONTEXT_FLOOR_BYTES
    assert kept_bytes(non_torch_bytes=0, cuda_graph_bytes=0, total_bytes=GIB // 4) == GIB // 4


def test_vllm_gets_sleep_mode_and_dev_routes_only_when_it_may_sleep() -> None:
    adapter = get_adapter("vllm")
    plain = LaunchSpec(deployment_id="1", model="/m", port=8000, gpu_indices=(0,))
    asleep = LaunchSpec(deployment_id="1", model="/m", port=8000, gpu_indices=(0,), sleep_mode=True)
    assert "--enable-sleep-mode" not in adapter.argv(plain)
    assert "VLLM_SERVER_DEV_MODE" not in adapter.build(plain).env
    assert "--enable-sleep-mode" in adapter.argv(asleep)
    assert adapter.build(asleep).env["VLLM_SERVER_DEV_MODE"] == "1"
