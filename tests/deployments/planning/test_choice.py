"""Which plan comes first: what a vLLM operator would pick for popular models on 1-8 GPUs."""

import pytest

from deployments.planning import Gpu, Host, Inventory, ModelSpec, PlanRequest, parse_gpus, plan
from tests.support.planning import LLAMA_8B, case_config

GIB = 2**30

# (model case, GPUs, request) -> (TP, PP, replicas, max_model_len or None for the model's own)
CHOICES = [
    # 7-14B dense: one GPU each holds many full-length requests; the rest are replicas.
    ("Qwen__Qwen2.5-7B-Instruct", 1, {}, (1, 1, 1, None)),
    ("Qwen__Qwen2.5-7B-Instruct", 4, {}, (1, 1, 4, None)),
    ("meta-llama__Llama-3.1-8B-Instruct", 1, {}, (1, 1, 1, None)),
    ("meta-llama__Llama-3.1-8B-Instruct", 2, {}, (1, 1, 2, None)),
    ("meta-llama__Llama-3.1-8B-Instruct", 8, {}, (1, 1, 8, None)),
    ("Qwen__Qwen3-14B", 4, {}, (1, 1, 4, None)),
    ("google__gemma-2-9b-it", 8, {}, (1, 1, 8, None)),
    # MoE (DeepSeek-V2-Lite, MLA): one GPU.
    ("deepseek-ai__DeepSeek-V2-Lite-Chat", 2, {}, (1, 1, 2, None)),
    # 70B FP8: one GPU only with a clipped context; TP 2 serves 131k once; TP 4 with headroom.
    ("RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic", 1, {}, (1, 1, 1, 7376)),
    ("RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic", 2, {}, (2, 1, 1, None)),
    ("RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic", 4, {}, (4, 1, 1, None)),
    ("RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic", 8, {}, (4, 1, 2, None)),
    # An explicit short context: the cheapest layout that serves it.
    ("RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic", 4, {"max_model_len": 8192}, (2, 1, 2, 8192)),
    # Asked concurrency is a requirement: 8 full-length requests need more than TP 4 holds.
    ("RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic", 8, {"concurrency": 8}, (8, 1, 1, None)),
    # Throughput: more replicas, accepting less headroom each.
    (
        "RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic",
        8,
        {"goal": "throughput"},
        (2, 1, 4, None),
    ),
]


@pytest.mark.parametrize(("case", "count", "asked", "expected"), CHOICES)
def test_first_plan_is_the_operators_choice(case, count, asked, expected):
    spec = ModelSpec.from_config(case_config(case), name=case)
    result = plan(spec, parse_gpus(f"{count}x80GiB@nvlink"), PlanRequest(**asked))
    first = result.plans[0]
    tp, pp, replicas, length = expected
    got = (first.tensor_parallel_size, first.pipeline_parallel_size, first.replicas)
    assert got == (tp, pp, replicas), result.reason
    assert first.fits
    assert first.max_model_len == (length or spec.derived_max_model_len)
    assert result.reason


def test_full_context_beats_a_clipped_one_and_the_reason_says_so():
    spec = ModelSpec.from_config(case_config("RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic"))
    result = plan(spec, parse_gpus("2x80GiB@nvlink"), PlanRequest())
    assert not result.plans[0].context_clipped
    assert result.reason == (
        "TP 2 × PP 1 serves the full 131,072-token context; TP 1 × PP 1 would clip it to "
        "7,376 tokens."
    )
    offer = result.clip_offer
    assert offer is not None and offer.gpus_per_replica == 1 and offer.max_model_len == 7376


def test_clipping_is_chosen_only_when_nothing_serves_the_length_and_says_so():
    spec = ModelSpec.from_config(case_config("RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic"))
    result = plan(spec, parse_gpus("1x80GiB"), PlanRequest())
    assert result.plans[0].context_clipped and result.clip_offer is None
    assert "No layout on these GPUs serves the 131,072-token context" in result.reason


def test_an_explicit_length_that_does_not_fit_is_refused_not_clipped():
    spec = ModelSpec.from_config(case_config("RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic"))
    result = plan(spec, parse_gpus("1x80GiB"), PlanRequest(max_model_len=131072))
    assert result.best is None
    assert "estimated maximum model length" in result.plans[0].reasons[0]


def test_tp_over_pcie_loses_to_pipeline_stages():
    spec = ModelSpec.from_config(case_config("RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic"))
    result = plan(spec, parse_gpus("4x80GiB@pcie"), PlanRequest(max_model_len=32768))
    first = result.plans[0]
    assert (first.tensor_parallel_size, first.link_rank) == (1, 0)
    assert result.reason == (
        "TP 1 × PP 2 needs 2 pipeline stages; TP 1 × PP 3 would run 3, with more hand-offs per token."
    )


def test_a_layout_inside_one_host_beats_one_across_hosts():
    one = lambda n: Host(n, (Gpu(0, "H100", 80 * GIB, 80 * GIB),), {})  # noqa: E731
    two = Host(
        "pair", tuple(Gpu(i, "H100", 80 * GIB, 80 * GIB) for i in range(2)), {(0, 1): "NV18"}
    )
    spec = ModelSpec.from_config({**LLAMA_8B, "max_position_embeddings": 131072})
    req = PlanRequest(concurrency=6)
    first = plan(spec, Inventory((one("a"), one("b"), two)), req).plans[0]
    assert not first.multi_host and first.gpus[0][0].host == "pair"


def test_bad_goal_and_concurrency_are_refused():
    from deployments.planning import PlanningError

    with pytest.raises(PlanningError, match="goal must be one of"):
        PlanRequest(goal="fastest").validate()
    with pytest.raises(PlanningError, match="concurrency must be a positive"):
        PlanRequest(concurrency=0).validate()
