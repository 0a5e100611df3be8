"""vLLM 0.33's hybrid KV-cache grouping on real configs: page sizes, group sizes, what one
request claims, the token count vLLM logs, and decode context parallel."""

import pytest

from deployments.planning import ModelSpec, PlanningError, PlanRequest, layer_notes, parse_gpus
from deployments.planning import plan as make_plan
from deployments.planning.memory.kvcache import stage_kv
from deployments.planning.memory.kvgroups import CacheSpec, KvRules, is_hopper, rules_for
from deployments.planning.model.layers import Kind
from deployments.planning.units import cdiv
from tests.deployments.planning.test_layers import (
    DEEPSEEK_V3,
    DEEPSEEK_V32,
    GEMMA4,
    GPT_OSS_20B,
    NEMOTRON_H,
    NEMOTRON_NANO,
    QWEN3_NEXT,
    QWEN35_27B,
    SCOUT,
    spec_of,
)
from tests.support.planning import LLAMA_8B

V33 = rules_for((0, 33, 0), dtype_bytes=2)


def layout(name, tp=1, pp=1, stage=0, rules=V33, element_bytes=2):
    spec = spec_of(name)
    return stage_kv(
        spec, tp=tp, pp=pp, pp_rank=stage, block_size=16, element_bytes=element_bytes, rules=rules
    )


def aligned_block(state_bytes, attn_bytes_per_token, align=16):
    """_align_hybrid_block_size with FlashAttention's 16-token kernel blocks (64: the prefill
    checkpoint grid of FlashInfer's Gated DeltaNet, vLLM's choice on Hopper)."""
    return align * cdiv(state_bytes, align * attn_bytes_per_token)


# (model, tp, attention block size, groups (layers each))
GROUPS = [
    # 1 097 728-byte GDN state; 2 KV heads × 256 × K/V × bf16 = 2048 bytes a token
    (QWEN3_NEXT, 1, aligned_block(1_097_728, 2048, 64), [12, 12, 12, 12]),
    # TP 4: KV heads replicated (1 per rank), state split in four
    (QWEN3_NEXT, 4, aligned_block(274_432, 1024, 64), [12, 12, 12, 12]),
    (QWEN35_27B, 1, aligned_block(3_207_168, 4 * 256 * 2 * 2, 64), [16, 16, 16, 16]),
    # 23 Mamba layers in groups of 6 (the attention count), the last one padded
    (NEMOTRON_NANO, 1, aligned_block(2_134_016, 2 * 128 * 2 * 2), [6, 6, 6, 5, 6]),
    # TP 8: 2 112 512-byte float32 Mamba-2 state; 54 Mamba layers in groups of 10
    (NEMOTRON_H, 8, aligned_block(2_112_512, 1 * 128 * 2 * 2), [10] * 5 + [4, 10]),
    (GPT_OSS_20B, 1, 16, [12, 12]),
    # the global layers' pages are half the local ones: their block doubles to 32 tokens
    (GEMMA4, 1, 16, [5, 5, 5, 5, 5, 5]),
    # chunked attention with the hybrid manager (0.14+): 36 chunked layers in groups of 12
    (SCOUT, 1, 16, [12, 12, 12, 12]),
    (DEEPSEEK_V3, 8, 16, [61]),
]


@pytest.mark.parametrize(("name", "tp", "block", "groups"), GROUPS)
def test_groups_and_block_size(name, tp, block, groups):
    kv = layout(name, tp)
    assert kv.block_size == block
    assert kv.groups == groups
    assert len({s.page_bytes for s, _ in kv.specs}) == 1


def test_mamba_page_padded_to_the_attention_page():
    kv = layout(QWEN3_NEXT)
    assert kv.page_bytes == 576 * 2048
    assert kv.block_bytes == 12 * kv.page_bytes


def test_without_flashinfer_gdn_the_block_stays_on_16_tokens():
    """A100 (or Blackwell): Triton GDN prefill, no prefill checkpoints for the linear layers."""
    rules = rules_for((0, 33, 0), dtype_bytes=2, hopper=False)
    kv = layout(QWEN3_NEXT, rules=rules)
    assert kv.block_size == 544
    assert kv.page_bytes - 1_097_728 == 16_384  # vLLM logs "Padding mamba page size by 1.49%"
    assert kv.request_pages(32768, 8192) == 3 * 2 + cdiv(32768, 544)
    # Mamba-2 exports its checkpoint with any kernel
    assert layout(NEMOTRON_NANO, rules=rules).request_pages(8192, 8192) == 4 * 3 + 4


@pytest.mark.parametrize(
    ("name", "total_gib", "hopper"),
    [
        ("NVIDIA H100 80GB HBM3", 80, True),
        ("NVIDIA H200", 141, True),
        ("NVIDIA A100-SXM4-80GB", 80, False),
        ("NVIDIA B200", 180, False),
        ("GPU 141GiB", 141, True),
        ("GPU 48GiB", 48, False),
    ],
)
def test_which_gpus_take_flashinfer_gdn(name, total_gib, hopper):
    assert is_hopper(name, total_gib << 30) is hopper


def test_gemma4_global_block_grows_to_match_the_page():
    kv = layout(GEMMA4)
    full = next(s for s, _ in kv.specs if s.kind is Kind.FULL)
    local = next(s for s, _ in kv.specs if s.kind is Kind.SLIDING)
    assert (full.block_size, local.block_size) == (32, 16)
    assert full.page_bytes == local.page_bytes == 16 * 8 * 256 * 2 * 2


# (model, max_model_len, blocks one request takes from the pool, summed over groups)
PAGES = [
    # 3 GDN groups × (running state, previous, prefill checkpoint) + the attention group
    (QWEN3_NEXT, 32768, 3 * 3 + cdiv(32768, 576)),
    (NEMOTRON_NANO, 8192, 4 * 3 + cdiv(8192, 2096)),
    # sliding window 128 with two batches of 8192 in flight, +1 for an unaligned start
    (GPT_OSS_20B, 8192, 512 + 513),
    (GPT_OSS_20B, 131072, 8192 + cdiv(127 + 2 * 8192, 16) + 1),
    (GEMMA4, 32768, 5 * (cdiv(1023 + 2 * 8192, 16) + 1) + cdiv(32768, 32)),
    # three chunked groups (a chunk and two batches in flight) and the global (NoPE) group
    (SCOUT, 32768, 3 * cdiv(8192 + 2 * 8192, 16) + cdiv(32768, 16)),
]


@pytest.mark.parametrize(("name", "length", "pages"), PAGES)
def test_request_pages(name, length, pages):
    kv = layout(name)
    assert kv.request_pages(length, 8192) == pages
    assert kv.request_bytes(length, 8192) == pages * kv.block_bytes


def test_chunked_layers_keep_chunks_with_the_hybrid_manager_on():
    rules = KvRules(chunked_hybrid=True)
    kv = layout(SCOUT, rules=rules)
    assert kv.groups == [12, 12, 12, 12]
    assert kv.request_pages(32768, 8192) == 3 * cdiv(8192 + 2 * 8192, 16) + cdiv(32768, 16)


@pytest.mark.parametrize(("version", "chunked"), [((0, 13, 0), False), ((0, 14, 0), True)])
def test_the_chunked_hybrid_default_by_version(version, chunked):
    """envs.py: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE "0" in 0.13, "1" from 0.14
    (issue 38: Llama 4 on the 0.32 CPU build logged four groups of 12)."""
    assert rules_for(version, dtype_bytes=2).chunked_hybrid is chunked
    kv = layout(SCOUT, rules=rules_for(version, dtype_bytes=2))
    assert kv.groups == ([12, 12, 12, 12] if chunked else [48])


# (version, group ratio, in-flight batches beyond pp, align mode, null block held out of the
# check, pages a Mamba-2 layer and a Gated DeltaNet layer (Hopper) claim per request), read from
# each wheel's sources (memory/kvgroups.py names the files)
VERSIONS = [
    ((0, 10, 1), 1.0, 0, False, False, 1, 1),
    ((0, 11, 0), 1.0, 0, False, False, 1, 1),
    ((0, 12, 0), 1.25, 0, False, False, 1, 1),
    ((0, 17, 0), 1.25, 0, False, False, 1, 1),
    ((0, 18, 0), 1.5, 0, False, False, 1, 1),
    ((0, 19, 0), 1.5, 0, False, False, 1, 1),
    ((0, 25, 0), 1.5, 0, False, False, 1, 1),
    ((0, 26, 0), 1.5, 1, True, False, 2, 2),
    ((0, 28, 0), 1.5, 1, True, False, 2, 2),
    ((0, 29, 0), 1.5, 1, True, True, 2, 2),
    ((0, 31, 0), 1.5, 1, True, True, 2, 2),
    ((0, 32, 0), 1.5, 1, True, True, 3, 2),
    ((0, 33, 0), 1.5, 1, True, True, 3, 3),
]


@pytest.mark.parametrize(("version", "ratio", "extra", "align", "null", "mamba", "gdn"), VERSIONS)
def test_rules_of_each_version(version, ratio, extra, align, null, mamba, gdn):
    rules = rules_for(version, dtype_bytes=2)
    assert (rules.group_ratio, rules.extra_in_flight_batches) == (ratio, extra)
    assert (rules.mamba_align, rules.null_block) == (align, null)
    assert CacheSpec(Kind.MAMBA, 1, 16).pages(4096, 8192, rules) == mamba
    assert CacheSpec(Kind.LINEAR, 1, 16).pages(4096, 8192, rules) == gdn
    off_hopper = rules_for(version, dtype_bytes=2, hopper=False)
    assert CacheSpec(Kind.LINEAR, 1, 16).pages(4096, 8192, off_hopper) == min(gdn, 2)


def gpt_oss_with(full_layers: int):
    """gpt-oss-20b's config with ``full_layers`` of its 24 layers full attention, the rest
    sliding: bucket sizes whose ratio the versions' group rules split differently."""
    from tests.support.planning import fixture_config

    raw = fixture_config(GPT_OSS_20B)
    kinds = ["full_attention"] * full_layers + ["sliding_attention"] * (24 - full_layers)
    return ModelSpec.from_config({**raw, "layer_types": kinds})


@pytest.mark.parametrize(
    ("full_layers", "version", "groups"),
    [
        (13, (0, 11, 0), [11, 2, 11]),  # the smallest bucket: 13 full layers need two groups
        (13, (0, 12, 0), [13, 11]),  # 13 < 11 × 1.25: one group size of 13, sliding padded
        (14, (0, 17, 0), [10, 4, 10]),  # 14 ≥ 10 × 1.25
        (14, (0, 18, 0), [14, 10]),  # 14 < 10 × 1.5
        (14, (0, 33, 0), [14, 10]),
    ],
)
def test_group_size_of_each_version(full_layers, version, groups):
    rules = rules_for(version, dtype_bytes=2)
    spec = gpt_oss_with(full_layers)
    kv = stage_kv(spec, tp=1, pp=1, pp_rank=0, block_size=16, element_bytes=2, rules=rules)
    assert kv.groups == groups
    assert kv.block_bytes == 16 * 8 * 64 * 2 * 2 * max(groups)


@pytest.mark.parametrize(
    ("version", "pages"),
    [
        ((0, 19, 0), 3 * 1 + cdiv(32768, 544)),  # no prefix caching: one state per GDN group
        ((0, 26, 0), 3 * 2 + cdiv(32768, 544)),  # align: running and previous state
        ((0, 33, 0), 3 * 3 + cdiv(32768, 576)),  # + FlashInfer's checkpoint, 64-token grid
    ],
)
def test_qwen3_next_request_of_each_version(version, pages):
    rules = rules_for(version, dtype_bytes=2)
    assert layout(QWEN3_NEXT, rules=rules).request_pages(32768, 8192) == pages


def test_versions_before_026_keep_one_batch_in_flight_for_windows():
    old = rules_for((0, 19, 0), dtype_bytes=2)
    kv = layout(GPT_OSS_20B, rules=old)
    assert kv.request_pages(131072, 8192) == 8192 + cdiv(127 + 8192, 16) + 1


def test_mla_at_tp8_pp2_keeps_the_whole_latent_on_each_rank():
    first, last = layout(DEEPSEEK_V3, tp=8, pp=2, stage=0), layout(DEEPSEEK_V3, tp=8, pp=2, stage=1)
    assert (first.groups, last.groups) == ([31], [30])
    assert first.page_bytes == 16 * 576 * 2
    assert layout(DEEPSEEK_V32, tp=8).page_bytes == 16 * (576 * 2 + 132)
    ds_mla = rules_for((0, 33, 0), dtype_bytes=2, kv_cache_dtype="fp8_ds_mla")
    assert layout(DEEPSEEK_V3, tp=8, rules=ds_mla, element_bytes=1).page_bytes == 16 * 656


def h200(n):
    return parse_gpus(f"{n}x141GiB")


def planned(name, **req):
    spec = spec_of(name)
    return make_plan(spec, h200(req.pop("gpus")), PlanRequest(**req)).plans[0]


@pytest.mark.parametrize(
    ("name", "tp", "length"), [(QWEN3_NEXT, 4, 32768), (GPT_OSS_20B, 1, 131072), (GEMMA4, 2, 8192)]
)
def test_logged_tokens_follow_the_grouping(name, tp, length):
    p = planned(name, gpus=tp, tensor_parallel_size=tp, max_model_len=length)
    kv = layout(name, tp)
    blocks = p.per_gpu[0].kv_cache_bytes // kv.block_bytes
    assert p.fits
    assert p.kv_cache_tokens == int(blocks / kv.request_pages(length, 8192) * length)


def test_hybrid_tokens_are_not_a_dense_per_layer_sum():
    p = planned(QWEN3_NEXT, gpus=4, tensor_parallel_size=4, max_model_len=32768)
    # every layer as full attention with 1 KV head of 256 per rank: the dense rule's figure
    dense = p.per_gpu[0].kv_cache_bytes // (48 * 1 * 256 * 2 * 2)
    assert p.kv_cache_tokens > 2.5 * dense


def test_decode_context_parallel_splits_the_tokens():
    base = planned(DEEPSEEK_V3, gpus=8, tensor_parallel_size=8, max_model_len=32768)
    dcp = planned(
        DEEPSEEK_V3,
        gpus=8,
        tensor_parallel_size=8,
        max_model_len=32768,
        decode_context_parallel_size=8,
    )
    assert dcp.fits
    assert dcp.engine_settings.decode_context_parallel_size == 8
    assert 7.9 < dcp.kv_cache_tokens / base.kv_cache_tokens <= 8.0


@pytest.mark.parametrize(
    ("name", "tp", "dcp", "message"),
    [
        (DEEPSEEK_V3, 8, 3, "tp_size=8 must be divisible by dcp_size=3."),
        (SCOUT, 8, 2, "requires `--tensor-parallel-size` (8) to be greater than"),
        (GPT_OSS_20B, 16, 2, "DCP not support sliding window."),
    ],
)
def test_decode_context_parallel_refusals(name, tp, dcp, message):
    p = planned(
        name, gpus=tp, tensor_parallel_size=tp, max_model_len=8192, decode_context_parallel_size=dcp
    )
    assert not p.fits
    assert any(message in r for r in p.reasons)


def test_decode_context_parallel_must_be_positive():
    with pytest.raises(PlanningError, match="decode_context_parallel_size"):
        PlanRequest(decode_context_parallel_size=0).validate()


def test_dense_plans_do_not_move():
    spec = ModelSpec.from_config(LLAMA_8B)
    kv = stage_kv(spec, tp=1, pp=1, pp_rank=0, block_size=16, element_bytes=2, rules=V33)
    assert kv.groups == [32]
    assert kv.block_bytes == 32 * 16 * 8 * 128 * 2 * 2
    assert kv.request_pages(8192, 8192) == 512


def test_unknown_kind_warns_in_the_plan():
    config = {**LLAMA_8B, "layer_types": ["full_attention"] * 31 + ["quantum_attention"]}
    spec = ModelSpec.from_config(config)
    p = make_plan(spec, h200(1), PlanRequest(max_model_len=8192)).plans[0]
    assert p.fits
    assert any("'quantum_attention'" in w for w in p.warnings)


@pytest.mark.parametrize(
    ("name", "starts"),
    [
        (QWEN3_NEXT, "linear-attention state per sequence: 36 of 48 layers (Gated DeltaNet)"),
        (NEMOTRON_NANO, "linear-attention state per sequence: 23 of 52 layers (Mamba)"),
        (GPT_OSS_20B, "window-sized KV for local layers: 12 of 24 layers attend through a 128"),
        (SCOUT, "chunked local attention on 36 of 48 layers (8192-token chunks)"),
        (DEEPSEEK_V3, "latent attention (MLA): one 576-wide latent"),
    ],
)
def test_layer_notes(name, starts):
    notes = layer_notes(spec_of(name), tp=2)
    assert any(n.startswith(starts) for n in notes), notes


def test_dense_model_has_no_layer_notes():
    assert layer_notes(ModelSpec.from_config(LLAMA_8B)) == ()


def test_qwen3_next_state_note_gives_the_size_per_gpu():
    (note,) = layer_notes(spec_of(QWEN3_NEXT), tp=4)
    assert f"{274_432 / 2**20:.2f} MiB per GPU" in note
    assert "only the 12 attention layers grow with the context" in note


def test_033_checks_one_request_against_the_blocks_left_after_the_null_block():
    spec = ModelSpec.from_config(LLAMA_8B)
    kv = stage_kv(spec, tp=1, pp=1, pp_rank=0, block_size=16, element_bytes=2, rules=V33)
    exact = kv.request_bytes(8192, 8192)
    assert kv.check_bytes(exact) == exact - kv.block_bytes
    assert kv.longest_fitting_len(kv.check_bytes(exact), 8192) == 8192 - 16
    old = rules_for((0, 19, 0), dtype_bytes=2)
    kv19 = stage_kv(spec, tp=1, pp=1, pp_rank=0, block_size=16, element_bytes=2, rules=old)
    assert kv19.longest_fitting_len(kv19.check_bytes(exact), 8192) == 8192


@pytest.mark.parametrize(
    ("version", "starts", "ends"),
    [
        (
            "0.33.0",
            "To serve at least one request with the model's max seq len (131072)",
            "details.",
        ),
        (
            "0.19.0",
            "To serve at least one request with the models's max seq len (131072)",
            "details.",
        ),
        (
            "0.12.0",
            "To serve at least one request with the models's max seq len (131072)",
            "engine.",
        ),
    ],
)
def test_too_long_in_the_words_of_each_version(version, starts, ends):
    spec = ModelSpec.from_config({**LLAMA_8B, "max_position_embeddings": 131072})
    req = PlanRequest(tensor_parallel_size=1, max_model_len=131072, vllm_version=version)
    p = make_plan(spec, parse_gpus("1x24GiB"), req).plans[0]
    assert not p.fits
    assert p.reasons[0].startswith(starts) and p.reasons[0].endswith(ends)


@pytest.mark.parametrize(
    ("version", "ends"),
    [
        ((0, 11, 0), "when initializing the engine."),
        ((0, 13, 0), "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/"),
        ((0, 22, 0), "(this flag also controls CPU memory reservation on the CPU backend, despite"),
    ],
)
def test_no_kv_memory_in_the_words_of_each_version(version, ends):
    from deployments.planning.memory.layout import no_kv_memory

    text = no_kv_memory(version)
    assert text.startswith("No available memory for the cache blocks.")
    assert ends in text


@pytest.mark.parametrize(
    ("version", "block", "state_pages"),
    [("0.19.0", 784, 3 * 1), ("0.26.0", 784, 3 * 2), ("0.33.0", 832, 3 * 3)],
)
def test_hybrid_concurrency_is_what_vllm_logs(version, block, state_pages):
    """Qwen3.5-27B at 32k on one 96 GiB GPU: 16 attention and 48 Gated DeltaNet layers in four
    groups of 16. vLLM's "Maximum concurrency" is blocks over the pages one request claims in
    all four groups; before 0.21 the "GPU KV cache size" it prints is blocks // 4 × block, so
    the concurrency is not that figure over the length."""
    req = PlanRequest(tensor_parallel_size=1, max_model_len=32768, vllm_version=version)
    p = make_plan(spec_of(QWEN35_27B), parse_gpus("1x96GiB"), req).plans[0]
    blocks = p.per_gpu[0].kv_cache_bytes // (16 * block * 4 * 256 * 2 * 2)
    pages = state_pages + cdiv(32768, block)
    assert p.max_concurrency == pytest.approx(blocks / pages, abs=0.01)
    if version == "0.19.0":
        assert p.kv_cache_tokens == blocks // 4 * block
    else:
        assert p.kv_cache_tokens == int(blocks / pages * 32768)


@pytest.mark.parametrize(
    ("version", "block", "pages"),
    [
        # no prefix caching: one state per Mamba group, the smallest 16-multiple block
        ((0, 25, 0), 16 * cdiv(2_134_016, 16 * 1024), 4 * 1 + cdiv(32768, 2096)),
        # "all" (nemotron_h declares SupportsMambaPrefixCaching): blocks of whole 128-token
        # chunks, and a state in every block of the request in each Mamba group
        ((0, 27, 0), 128 * cdiv(cdiv(2_134_016, 1024), 128), 5 * cdiv(32768, 2176)),
        # "align" only: the running and the previous state
        ((0, 28, 0), 2096, 4 * 2 + cdiv(32768, 2096)),
        ((0, 33, 0), 2096, 4 * 3 + cdiv(32768, 2096)),
    ],
)
def test_nemotron_nano_mamba_cache_mode_of_each_version(version, block, pages):
    rules = rules_for(version, dtype_bytes=2, model_type="nemotron_h")
    kv = layout(NEMOTRON_NANO, rules=rules)
    assert kv.block_size == block
    assert kv.request_pages(32768, 8192) == pages


def test_gated_deltanet_stays_in_align_mode_where_mamba_hybrids_use_all():
    rules = rules_for((0, 27, 0), dtype_bytes=2, model_type="qwen3_next")
    assert not rules.mamba_all
    assert layout(QWEN3_NEXT, rules=rules).request_pages(32768, 8192) == 3 * 2 + cdiv(32768, 544)


@pytest.mark.parametrize(
    ("version", "state_bytes"),
    [
        ((0, 12, 0), 15_360 + 32 * 64 * 256 * 2),  # no config hook: the model dtype (bf16)
        ((0, 19, 0), 15_360 + 32 * 64 * 256 * 2),  # NemotronHForCausalLMConfig: "float16"
        ((0, 20, 0), 15_360 + 32 * 64 * 256 * 4),  # … "float32" from 0.20
        ((0, 33, 0), 15_360 + 32 * 64 * 256 * 4),
    ],
)
def test_nemotron_h_ssm_state_dtype_of_each_version(version, state_bytes):
    """Nemotron-H-56B at TP 8 names no mamba_ssm_cache_dtype; Nemotron-3-Nano names float32,
    which every version keeps."""
    rules = rules_for(version, dtype_bytes=2)
    state = spec_of(NEMOTRON_H).layer_plan.state
    assert state.bytes_per_sequence(8, 2, default_ssm_bytes=rules.default_ssm_bytes) == state_bytes
    nano = spec_of(NEMOTRON_NANO).layer_plan.state
    assert nano.bytes_per_sequence(1, 2, default_ssm_bytes=rules.default_ssm_bytes) == 2_134_016
