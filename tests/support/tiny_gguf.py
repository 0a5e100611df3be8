"""A random Llama as GGUF (2 layers, hidden 64) that a real llama-server loads in a fraction of
a second: reference llamacpp.md §2.1 (a). Its output is random bytes; only the plumbing is
under test. Needs the `gguf` package (callers skip without it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN = 64
LAYERS = 2
HEADS = 2
KV_HEADS = 1  # head_dim 32: a quantized KV cache needs head_dim divisible by 32 (§2.3)
FFN = 128
CONTEXT = 2048
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _vocab() -> tuple[list[str], list[float], list[int]]:
    import gguf

    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    kinds = [gguf.TokenType.UNKNOWN] + [gguf.TokenType.CONTROL] * 4
    tokens += [f"<0x{b:02X}>" for b in range(256)]  # byte fallback: any text tokenizes
    kinds += [gguf.TokenType.BYTE] * 256
    words = ["▁the", "▁a", "▁is", "▁1", "▁+", "▁=", "▁2", "▁hello", "▁world"]
    tokens += words
    kinds += [gguf.TokenType.NORMAL] * len(words)
    scores = [0.0] * len(tokens)
    return tokens, scores, [int(k) for k in kinds]


def write_tiny_llama(path: Path, *, seed: int = 0) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    tokens, scores, kinds = _vocab()
    head_dim = HIDDEN // HEADS
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("shardboard-tiny-llama")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(kinds)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(4)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)

    def tensor(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(np.float32))

    vocab = len(tokens)
    tensor("token_embd.weight", vocab, HIDDEN)
    for il in range(LAYERS):
        writer.add_tensor(f"blk.{il}.attn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        tensor(f"blk.{il}.attn_q.weight", HIDDEN, HIDDEN)
        tensor(f"blk.{il}.attn_k.weight", KV_HEADS * head_dim, HIDDEN)
        tensor(f"blk.{il}.attn_v.weight", KV_HEADS * head_dim, HIDDEN)
        tensor(f"blk.{il}.attn_output.weight", HIDDEN, HIDDEN)
        writer.add_tensor(f"blk.{il}.ffn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        tensor(f"blk.{il}.ffn_gate.weight", FFN, HIDDEN)
        tensor(f"blk.{il}.ffn_up.weight", FFN, HIDDEN)
        tensor(f"blk.{il}.ffn_down.weight", HIDDEN, FFN)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    tensor("output.weight", vocab, HIDDEN)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def kv_bytes(cells: int) -> int:
    """The f16 KV cache llama.cpp allocates for `cells` tokens of this model (§4.1)."""
    return cells * LAYERS * 2 * (KV_HEADS * (HIDDEN // HEADS)) * 2
