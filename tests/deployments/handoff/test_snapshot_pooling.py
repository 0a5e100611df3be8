"""An embedding plan's snapshot: vLLM's pooling flags travel from the planner through the
stored row to the argv, rows written before them still load, and transformers serve refuses."""

from __future__ import annotations

import pytest

from deployments import planning
from deployments.engines import LaunchSpec, TransformersAdapter, UnsupportedSpec, VllmAdapter
from deployments.handoff.snapshot import PlanSnapshot, from_plan, planned_command

QWEN3_EMBEDDING = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 3072,
    "vocab_size": 151669,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
]


def _snapshot(**st: object) -> PlanSnapshot:
    spec = planning.ModelSpec.from_config(QWEN3_EMBEDDING, name="q", **st)  # type: ignore[arg-type]
    plan = planning.plan(spec, planning.parse_gpus("1x80GiB"), planning.PlanRequest()).plans[0]
    return from_plan(plan, model_ref="Qwen/Qwen3-Embedding-0.6B")


def test_decoder_embedder_snapshot_carries_runner_and_convert() -> None:
    snap = _snapshot(st_modules=MODULES, st_pooling={"pooling_mode_lasttoken": True})
    assert (snap.engine_args.runner, snap.engine_args.convert) == ("pooling", "embed")
    assert snap.embeds and (snap.kv_cache_tokens or 0) > 0  # a decoder keeps its KV cache
    again = PlanSnapshot.from_json(snap.to_json())
    assert again == snap
    argv = planned_command(again, "vllm", model="Qwen/Qwen3-Embedding-0.6B")
    assert argv[argv.index("--runner") + 1] == "pooling"
    assert argv[argv.index("--convert") + 1] == "embed"


def test_generative_plan_and_older_rows_have_no_pooling_flags() -> None:
    snap = _snapshot()  # no modules.json: Qwen3ForCausalLM generates
    assert not snap.embeds and snap.engine_args.runner is None
    row = snap.to_json()
    for key in ("runner", "convert"):
        del row["engine_args"][key]  # a version-2 row written before these fields
    old = PlanSnapshot.from_json(row)
    assert old == snap and not old.embeds
    assert "--runner" not in planned_command(old, "vllm", model="Qwen/Qwen3-0.6B")


def test_vllm_smoke_tests_an_embedding_model_with_embeddings() -> None:
    spec = LaunchSpec(deployment_id="1", model="/m", port=8000, gpu_indices=(0,), runner="pooling")
    command = VllmAdapter().build(spec)
    assert command.embeds
    assert command.argv[command.argv.index("--runner") + 1] == "pooling"
    plain = VllmAdapter().build(LaunchSpec(deployment_id="1", model="/m", port=1, gpu_indices=(0,)))
    assert not plain.embeds and "--runner" not in plain.argv


def test_transformers_serve_refuses_an_embedding_model() -> None:
    spec = LaunchSpec(deployment_id="1", model="/m", port=1, device="cpu", runner="pooling")
    with pytest.raises(UnsupportedSpec, match="no /v1/embeddings route"):
        TransformersAdapter().build(spec)
