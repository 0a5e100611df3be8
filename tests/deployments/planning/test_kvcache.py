"""KV-cache sizes against the textbook formula and vLLM's block accounting."""

import pytest

from deployments.planning import ModelSpec, kv_bytes_per_token
from deployments.planning.memory.kvcache import stage_kv
from deployments.planning.model.layers import Kind
from tests.support.planning import LLAMA_70B, case_config


def mha(config: dict) -> dict:
    return {**config, "num_key_value_heads": config["num_attention_heads"]}


@pytest.mark.parametrize(("seq", "batch"), [(4096, 1), (8192, 16), (2048, 64)])
def test_mha_formula(seq, batch):
    spec = ModelSpec.from_config(mha(LLAMA_70B))
    per_token = kv_bytes_per_token(spec, tp=1, element_bytes=2)
    assert per_token * seq * batch == 2 * 80 * 8192 * seq * batch * 2


def test_eight_of_64_kv_heads_is_eight_times_smaller():
    full = kv_bytes_per_token(ModelSpec.from_config(mha(LLAMA_70B)), tp=1, element_bytes=2)
    gqa = kv_bytes_per_token(ModelSpec.from_config(LLAMA_70B), tp=1, element_bytes=2)
    assert full == 8 * gqa


@pytest.mark.parametrize(("tp", "heads_per_rank"), [(1, 8), (2, 4), (8, 1), (16, 1)])
def test_kv_heads_per_rank(tp, heads_per_rank):
    spec = ModelSpec.from_config(LLAMA_70B)
    assert kv_bytes_per_token(spec, tp=tp, element_bytes=2) == 2 * 80 * heads_per_rank * 128 * 2


def test_fp8_cache_is_one_byte():
    spec = ModelSpec.from_config(LLAMA_70B)
    assert kv_bytes_per_token(spec, tp=1, element_bytes=1) * 2 == kv_bytes_per_token(
        spec, tp=1, element_bytes=2
    )


def test_mla_latent_not_split_by_tp():
    spec = ModelSpec.from_config(case_config("deepseek-ai__DeepSeek-V2-Lite-Chat"))
    one = kv_bytes_per_token(spec, tp=1, element_bytes=2)
    assert one == 27 * (512 + 64) * 2
    assert kv_bytes_per_token(spec, tp=4, element_bytes=2) == one


def test_gemma2_hybrid_groups_report_tokens_per_group():
    spec = ModelSpec.from_config(case_config("google__gemma-2-9b-it"))
    kv = stage_kv(spec, tp=1, pp=1, pp_rank=0, block_size=16, element_bytes=2)
    assert (kv.count(Kind.FULL), kv.count(Kind.SLIDING), kv.groups) == (21, 21, [21, 21])
    blocks = kv.num_blocks(54 * 2**30)
    assert blocks == 54 * 2**30 // (16 * 8 * 256 * 2 * 2 * 21)
    assert kv.tokens(blocks) == blocks // 2 * 16


def test_request_bytes_grow_with_context():
    spec = ModelSpec.from_config(LLAMA_70B)
    kv = stage_kv(spec, tp=1, pp=1, pp_rank=0, block_size=16, element_bytes=2)
    assert kv.request_bytes(8192, 8192) == 512 * kv.page_bytes * 80
    assert kv.longest_fitting_len(kv.request_bytes(8192, 8192), 8192) == 8192
