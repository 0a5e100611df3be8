"""A tiny random-weight Llama and its own tokenizer: engines answer without a GPU or the Hub."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the engine-cpu extra; imported where used, so the web side runs without it
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

COMPLETE_MARKER = ".shardboard-demo-complete"
# Where `manage.py demo_model` writes it, under the first model root, and its GGUF (llama.cpp).
DEMO_MODEL_DIR = "shardboard-demo-tiny-llama"
DEMO_GGUF = "shardboard-demo-tiny-llama-gguf/demo-tiny-llama-Q8_0.gguf"
DEMO_ADAPTER = "shardboard-demo-lora"  # a rank-8 LoRA adapter of it, to load at run time
VOCAB_SIZE = 384
MAX_POSITION_EMBEDDINGS = 512
SEED = 1234
# The demo's shape. head_dim 64: vLLM's CPU attention takes head sizes of 32 and up (head_dim 16
# starts, then its first request fails "Unsupported CPU attention configuration: head_dim=16
# isa=2").
DEMO_SHAPE: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}

# Arithmetic and chat-like lines: enough for byte-level BPE merges on the smoke prompt "1 + 1 =".
_CORPUS = [
    "1 + 1 = 2",
    "2 + 2 = 4",
    "3 + 4 = 7",
    "10 - 3 = 7",
    "hello, how are you today?",
    "I am a tiny demo model running on the CPU.",
    "The quick brown fox jumps over the lazy dog.",
    "Shardboard plans, launches and monitors model deployments.",
    "user: what is the answer? assistant: the answer is 42.",
    "system: you are a helpful assistant.",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{{ part['text'] }}{% endfor %}{% endif %}"
    "{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{{ '\\n' }}{% endif %}"
)
EOS = "<|endoftext|>"
PAD = "<|pad|>"
_SPECIAL_TOKENS = [EOS, PAD, "<|system|>", "<|user|>", "<|assistant|>"]


def demo_config() -> dict[str, object]:
    """The demo's config.json as the planner reads it (its vocabulary: the trained tokenizer's)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **DEMO_SHAPE,
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "tie_word_embeddings": True,
        "dtype": "float32",
    }


def is_complete(path: Path) -> bool:
    return (path / COMPLETE_MARKER).is_file()


def make_tiny_llama(path: Path) -> Path:
    """Write the demo model into `path` once; later calls return at once."""
    path = Path(path)
    if is_complete(path):
        return path
    if path.exists() and any(path.iterdir()):
        raise FileExistsError(f"{path} exists, is not empty and is not a complete demo model")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        _write_model(staging)
        (staging / COMPLETE_MARKER).write_text("ok\n")
        _publish(staging, path)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return path


def _publish(staging: Path, path: Path) -> None:
    if path.exists():
        path.rmdir()  # empty, checked above
    try:
        os.rename(staging, path)
    except OSError:
        if not is_complete(path):  # another process published first: that is fine
            raise


def _write_model(out_dir: Path) -> None:
    tokenizer = _train_tokenizer()
    tokenizer.save_pretrained(out_dir)
    model = _build_model(len(tokenizer), tokenizer)
    model.save_pretrained(out_dir, safe_serialization=True)


def _train_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(_CORPUS, trainer=trainer)
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # untyped __init__
        tokenizer_object=raw,
        bos_token=EOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        model_max_length=MAX_POSITION_EMBEDDINGS,
    )


def _build_model(vocab_size: int, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        **DEMO_SHAPE,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        dtype="float32",  # `torch_dtype` is its deprecated alias
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]  # untyped __init__
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        max_new_tokens=16,
    )
    return model


def make_llama_shape(
    path: Path, *, hidden_size: int, heads: int, kv_heads: int, layers: int
) -> Path:
    """A tiny random Llama of another shape (head_dim = hidden_size / heads) with the demo's
    tokenizer, written once: the shapes the planner's CPU sizing is checked on against vLLM."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = Path(path)
    if is_complete(path):
        return path
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer()
    tokenizer.save_pretrained(path)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=256,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        dtype="float32",
    )
    torch.manual_seed(SEED)
    LlamaForCausalLM(config).save_pretrained(path, safe_serialization=True)
    (path / COMPLETE_MARKER).write_text("ok\n")
    return path
