"""A LoRA adapter as PEFT saves it (adapter_config.json and the tensor names and shapes of its
safetensors header), and whether it fits a model, checked before any engine sees it.

vLLM refuses an adapter late and in its own words (lora/peft_helper.py ``validate_legal``,
lora/lora_model.py ``check_unexpected_modules``; a shape mismatch only when it copies the
tensors into its slots). Here the same rules run on the web side, from the header alone: the
rank against ``max_lora_rank``, the PEFT features vLLM does not serve, every target module
being a module of the model, and every tensor's shape matching that module's. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deployments.planning.errors import PlanningError

from .spec import ModelSpec

_TENSOR = re.compile(
    r"^(?:base_model\.model\.)?(?P<module>.+?)\.(?P<part>lora_A|lora_B|lora_embedding_A|"
    r"lora_embedding_B)(?:\.weight)?$"
)
_LAYER = re.compile(r"(?:^|\.)layers\.(?P<index>\d+)\.")
_EXPERT = re.compile(r"\.experts\.\d+\.")
# Module names of Llama-style decoders (Llama, Mistral, Qwen, Gemma, Phi-3's packed ones...).
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj")
MLP = ("gate_proj", "up_proj", "down_proj", "gate_up_proj", "w1", "w2", "w3")
EMBEDDINGS = ("embed_tokens", "lm_head")
KNOWN = frozenset((*ATTENTION, *MLP, *EMBEDDINGS))


class AdapterError(PlanningError):
    """An adapter_config.json or header that is not a LoRA adapter vLLM can load."""


@dataclass(frozen=True, slots=True)
class AdapterTensor:
    name: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AdapterSpec:
    """What an adapter is, from its config and its tensors' header (no weights read)."""

    base_model: str  # base_model_name_or_path ("" when the config names none)
    rank: int  # the largest: r and every rank_pattern value (vLLM's validate_legal)
    alpha: float
    target_modules: tuple[str, ...]  # as the config lists them (a regex string: one entry)
    tensors: tuple[AdapterTensor, ...]
    size_bytes: int
    unsupported: tuple[str, ...] = ()  # PEFT features vLLM refuses, in vLLM's words

    @property
    def modules(self) -> tuple[str, ...]:
        """The module names the tensors adapt (``q_proj``...), sorted."""
        return tuple(sorted({_module_of(t.name)[1] for t in self.tensors}))


def adapter_spec(
    config: Mapping[str, Any], tensors: Sequence[AdapterTensor], size_bytes: int
) -> AdapterSpec:
    """From adapter_config.json and the header's tensors; AdapterError for what vLLM refuses
    to read at all."""
    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        raise AdapterError(f"a {config.get('peft_type')} adapter: vLLM serves LoRA adapters only")
    try:
        r = int(config["r"])
    except (KeyError, TypeError, ValueError):
        raise AdapterError("adapter_config.json has no rank 'r'") from None
    patterns = config.get("rank_pattern") or {}
    ranks = [r, *(int(v) for v in patterns.values() if isinstance(v, int | float))]
    if min(ranks) <= 0:
        raise AdapterError(f"LoRA rank `r` must be a positive integer, got {min(ranks)}.")
    if not tensors:
        raise AdapterError("the adapter's safetensors file holds no tensors")
    for t in tensors:
        if _TENSOR.match(t.name) is None:
            raise AdapterError(f"tensor {t.name!r} is not a LoRA factor (lora_A / lora_B)")
    targets = config.get("target_modules") or ()
    return AdapterSpec(
        base_model=str(config.get("base_model_name_or_path") or ""),
        rank=max(ranks),
        alpha=float(config.get("lora_alpha") or r),
        target_modules=(targets,) if isinstance(targets, str) else tuple(map(str, targets)),
        tensors=tuple(tensors),
        size_bytes=size_bytes,
        unsupported=_unsupported(config),
    )


def _unsupported(config: Mapping[str, Any]) -> tuple[str, ...]:
    """PEFTHelper._validate_features and validate_legal's bias check (vLLM 0.32)."""
    found = []
    saved = config.get("modules_to_save") or []
    if any(m not in ("classifier", "score") for m in saved):
        found.append(
            "vLLM only supports modules_to_save being either None or "
            '["classifier", "score"] for classification models.'
        )
    if config.get("use_dora"):
        found.append("vLLM does not yet support DoRA.")
    if config.get("bias", "none") != "none" or config.get("lora_bias"):
        found.append("Adapter bias is not supported.")
    if config.get("layer_replication"):
        found.append("vLLM does not support layer_replication.")
    return tuple(found)


def _module_of(name: str) -> tuple[int | None, str, str]:
    """(layer index or None, module name, factor) of a tensor name."""
    m = _TENSOR.match(name)
    if m is None:  # adapter_spec checked every name
        raise AdapterError(f"tensor {name!r} is not a LoRA factor (lora_A / lora_B)")
    path = m.group("module")
    layer = _LAYER.search(path)
    return (int(layer.group("index")) if layer else None), path.rsplit(".", 1)[-1], m.group("part")


def expected_shapes(spec: ModelSpec, module: str, expert: bool = False) -> tuple[int, int] | None:
    """(in, out) features of one of the model's modules; None for a name not known here."""
    h, d = spec.hidden_size, spec.head_dim
    q, kv = spec.num_heads * d, spec.num_kv_heads * d
    inter = spec.moe.expert_intermediate_size if expert and spec.moe else spec.intermediate_size
    shapes = {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "qkv_proj": (h, q + 2 * kv),
        "gate_proj": (h, inter),
        "up_proj": (h, inter),
        "w1": (h, inter),
        "w3": (h, inter),
        "down_proj": (inter, h),
        "w2": (inter, h),
        "gate_up_proj": (h, 2 * inter),
        "embed_tokens": (spec.vocab_size, h),
        "lm_head": (h, spec.vocab_size),
    }
    return shapes.get(module)


def adapter_problems(
    adapter: AdapterSpec, spec: ModelSpec, *, max_lora_rank: int, served_model: str
) -> list[str]:
    """Why vLLM would refuse this adapter on a deployment of `spec` (`served_model`: its Hub
    id or folder name), the mismatch named; empty when it fits."""
    problems = list(adapter.unsupported)
    if adapter.rank > max_lora_rank:
        problems.append(
            f"its rank {adapter.rank} is over this deployment's max_lora_rank {max_lora_rank} "
            "(LoRA rank is greater than max_lora_rank; launch with a larger --max-lora-rank)"
        )
    if adapter.base_model and not same_model(adapter.base_model, served_model, spec.name):
        problems.append(
            f"it was trained on {adapter.base_model!r}, not on this deployment's model "
            f"{served_model!r}"
        )
    return problems + _shape_problems(adapter, spec)


def same_model(base: str, *names: str) -> bool:
    """Whether the adapter's base names the same model: the repo or folder name, any case
    (a local copy of ``org/Model`` is a folder ``Model``)."""
    want = _tail(base)
    return any(want == _tail(n) for n in names if n)


def _tail(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


def _shape_problems(adapter: AdapterSpec, spec: ModelSpec) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for t in adapter.tensors:
        layer, module, part = _module_of(t.name)
        if module in seen:
            continue
        if layer is not None and layer >= spec.num_layers:
            if f"layer {layer}" not in seen:
                seen.add(f"layer {layer}")
                problems.append(
                    f"{module} of layer {layer}: the model has {spec.num_layers} layers (0 to "
                    f"{spec.num_layers - 1})"
                )
            continue
        io = expected_shapes(spec, module, expert=_EXPERT.search(t.name) is not None)
        if io is None:
            seen.add(module)
            problems.append(
                f"target module {module!r} is not a module of this {spec.model_type or 'model'} "
                f"(its modules: {', '.join(sorted(KNOWN - {'w1', 'w2', 'w3'}))})"
            )
            continue
        if (why := _shape_mismatch(t, module, part, io)) is not None:
            seen.add(module)
            problems.append(why)
    return problems


def _shape_mismatch(t: AdapterTensor, module: str, part: str, io: tuple[int, int]) -> str | None:
    """lora_A is (r, in), lora_B (out, r); an embedding's A is (r, vocab), B (hidden, r)."""
    if len(t.shape) != 2:
        return f"{module}: {part} has {len(t.shape)} dimensions, a LoRA factor has 2"
    inn, out = io
    if part == "lora_embedding_A":
        want, what = (t.shape[0], inn), f"the vocabulary of {inn} rows"
    elif part == "lora_embedding_B":
        want, what = (out, t.shape[1]), f"the hidden size {out}"
    elif part == "lora_A":
        want, what = (t.shape[0], inn), f"{inn} inputs"
    else:
        want, what = (out, t.shape[1]), f"{out} outputs"
    if tuple(t.shape) != want:
        shape = " × ".join(str(n) for n in t.shape)
        return f"{module}: the adapter's {part} is {shape}, but the model's {module} has {what}"
    return None
