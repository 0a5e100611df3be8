"""Writing GGUF files for llama-server: the demo model converted, and small Llamas of any shape.

Only ``gguf`` + ``numpy`` (+ ``safetensors`` to read the demo model): no torch, and not
llama.cpp's convert_hf_to_gguf.py, which refuses the demo's byte-level BPE tokenizer (its
pre-tokenizer hash is unknown to it). The demo converted here tokenizes and generates exactly
as transformers does on the same weights (reference llamacpp.md §2.1 (b)).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

GGUF_TYPES = ("F32", "F16", "Q8_0", "Q4_0")
DEMO_GGUF_NAME = "demo-tiny-llama-{quant}.gguf"
_TOKEN_NORMAL, _TOKEN_CONTROL, _TOKEN_BYTE = 1, 3, 6


@dataclass(frozen=True, slots=True)
class LlamaShape:
    """A random Llama for tests and the accuracy bench (head_dim = hidden / heads)."""

    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    vocab_extra: int = 44  # word pieces beyond the 3 specials and 256 byte tokens
    context: int = 2048
    tied: bool = False
    seed: int = 0
    rms_eps: float = 1e-6

    @property
    def vocab(self) -> int:
        return 3 + 256 + self.vocab_extra


def _writer(path: Path, arch: str = "llama") -> Any:
    import gguf

    return gguf.GGUFWriter(str(path), arch)


def _add_tensor(writer: Any, name: str, data: NDArray[np.float32], quant: str) -> None:
    import gguf
    import numpy as np

    if data.ndim == 1 or quant == "F32":  # norms stay f32, as llama.cpp's converter keeps them
        writer.add_tensor(name, data.astype(np.float32))
    elif quant == "F16":
        writer.add_tensor(name, data.astype(np.float16))
    else:
        kind = gguf.GGMLQuantizationType[quant]
        writer.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)


def _file_type(quant: str) -> int:
    import gguf

    return int(gguf.LlamaFileType[f"MOSTLY_{quant}" if quant != "F32" else "ALL_F32"])


def _hparams(writer: Any, shape: LlamaShape, name: str, quant: str) -> None:
    writer.add_name(name)
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.hidden // shape.heads)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    writer.add_rope_freq_base(10000.0)
    writer.add_file_type(_file_type(quant))


def _finish(writer: Any, path: Path) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=False)
    writer.close()
    del path


def _publish(write: Any, path: Path) -> Path:
    """Write into a temporary file beside ``path``, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(Path(staging))
        os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return path


def write_random_llama(path: Path, shape: LlamaShape, *, quant: str = "Q8_0") -> Path:
    """A random Llama of ``shape``; its SentencePiece-style vocab (byte fallback) reads any text."""
    import numpy as np

    def write(target: Path) -> None:
        rng = np.random.default_rng(shape.seed)
        writer = _writer(target)
        _hparams(writer, shape, path.stem, quant)
        pieces = [f"▁w{i}" for i in range(shape.vocab_extra)]
        tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *pieces]
        kinds = [2, _TOKEN_CONTROL, _TOKEN_CONTROL] + [_TOKEN_BYTE] * 256
        kinds += [_TOKEN_NORMAL] * len(pieces)
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores([0.0] * len(tokens))
        writer.add_token_types(kinds)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        _random_tensors(writer, shape, quant, rng)
        _finish(writer, target)

    return _publish(write, path)


def _random_tensors(writer: Any, shape: LlamaShape, quant: str, rng: Any) -> None:
    import numpy as np

    head_dim = shape.hidden // shape.heads
    kv = shape.kv_heads * head_dim

    def mat(rows: int, cols: int) -> NDArray[np.float32]:
        values: NDArray[np.float32] = rng.standard_normal((rows, cols), dtype=np.float32)
        return values * np.float32(0.05)

    _add_tensor(writer, "token_embd.weight", mat(shape.vocab, shape.hidden), quant)
    for i in range(shape.layers):
        blk = f"blk.{i}"
        _add_tensor(writer, f"{blk}.attn_norm.weight", np.ones(shape.hidden, np.float32), quant)
        _add_tensor(writer, f"{blk}.attn_q.weight", mat(shape.hidden, shape.hidden), quant)
        _add_tensor(writer, f"{blk}.attn_k.weight", mat(kv, shape.hidden), quant)
        _add_tensor(writer, f"{blk}.attn_v.weight", mat(kv, shape.hidden), quant)
        _add_tensor(writer, f"{blk}.attn_output.weight", mat(shape.hidden, shape.hidden), quant)
        _add_tensor(writer, f"{blk}.ffn_norm.weight", np.ones(shape.hidden, np.float32), quant)
        _add_tensor(writer, f"{blk}.ffn_gate.weight", mat(shape.ffn, shape.hidden), quant)
        _add_tensor(writer, f"{blk}.ffn_up.weight", mat(shape.ffn, shape.hidden), quant)
        _add_tensor(writer, f"{blk}.ffn_down.weight", mat(shape.hidden, shape.ffn), quant)
    _add_tensor(writer, "output_norm.weight", np.ones(shape.hidden, np.float32), quant)
    if not shape.tied:
        _add_tensor(writer, "output.weight", mat(shape.vocab, shape.hidden), quant)


def convert_demo(model_dir: Path, out: Path, *, quant: str = "Q8_0") -> Path:
    """The demo model of ``demo_model.make_tiny_llama`` as one GGUF file at ``out``."""
    if quant not in GGUF_TYPES:
        raise ValueError(f"quant {quant!r}: one of {', '.join(GGUF_TYPES)}")
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    tok = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    shape = LlamaShape(
        hidden=config["hidden_size"],
        layers=config["num_hidden_layers"],
        heads=config["num_attention_heads"],
        kv_heads=config["num_key_value_heads"],
        ffn=config["intermediate_size"],
        context=config["max_position_embeddings"],
        tied=bool(config.get("tie_word_embeddings")),
        rms_eps=float(config.get("rms_norm_eps", 1e-6)),
    )

    def write(target: Path) -> None:
        writer = _writer(target)
        _hparams(writer, shape, "shardboard-demo-tiny-llama", quant)
        _demo_tokenizer(writer, tok, config)
        _demo_tensors(writer, model_dir, shape, quant)
        _finish(writer, target)

    return _publish(write, out)


def _demo_tokenizer(writer: Any, tok: dict[str, Any], config: dict[str, Any]) -> None:
    from deployments.catalog.demo_model import CHAT_TEMPLATE

    vocab: dict[str, int] = dict(tok["model"]["vocab"])
    special = {added["content"]: added["id"] for added in tok.get("added_tokens", [])}
    vocab |= special
    tokens = [""] * (max(vocab.values()) + 1)
    for text, index in vocab.items():
        tokens[index] = text
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")  # HF ByteLevel(use_regex=True): GPT-2's pre-tokenizer
    writer.add_token_list(tokens)
    writer.add_token_types([_TOKEN_CONTROL if t in special else _TOKEN_NORMAL for t in tokens])
    merges = tok["model"]["merges"]
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_pad_token_id(config["pad_token_id"])
    writer.add_add_bos_token(False)  # transformers adds none for this tokenizer
    writer.add_chat_template(CHAT_TEMPLATE)


def _permute(w: NDArray[np.float32], heads: int) -> NDArray[np.float32]:
    """HF's rotate-half Q/K rows → GGML's interleaved RoPE order."""
    rows, cols = w.shape
    return w.reshape(heads, 2, rows // heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def _demo_tensors(writer: Any, model_dir: Path, shape: LlamaShape, quant: str) -> None:
    from safetensors.numpy import load_file

    weights: dict[str, Any] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        weights |= load_file(file)
    _add_tensor(writer, "token_embd.weight", weights["model.embed_tokens.weight"], quant)
    names = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for i in range(shape.layers):
        for hf, ours in names.items():
            data = weights[f"model.layers.{i}.{hf}.weight"]
            if ours == "attn_q":
                data = _permute(data, shape.heads)
            elif ours == "attn_k":
                data = _permute(data, shape.kv_heads)
            _add_tensor(writer, f"blk.{i}.{ours}.weight", data, quant)
    _add_tensor(writer, "output_norm.weight", weights["model.norm.weight"], quant)
    if "lm_head.weight" in weights and not shape.tied:
        _add_tensor(writer, "output.weight", weights["lm_head.weight"], quant)
