"""Embedding and classification models: whether vLLM 0.33 serves a model with its pooling
runner, and whether that model keeps a KV cache at all.

vLLM decides in ``ModelConfig._get_default_runner_type`` (vllm/config/model.py:1283-1301): a
sentence-transformers ``modules.json`` makes any model a pooling model, even a ``*ForCausalLM``
(Qwen3-Embedding); else an architecture its registry lists as a pooling model
(``_EMBEDDING_MODELS``, ``_SEQUENCE_CLASSIFICATION_MODELS``, model_executor/models/registry.py:
220-345); else the architecture's suffix (``_SUFFIX_TO_DEFAULTS``, config/model.py:2340-2357:
``*Model`` and ``*EmbeddingModel`` embed, ``*ForSequenceClassification`` classifies). The
convert type follows (config/model.py:1360-1384): ``embed`` for a sentence-transformers model
whose architecture is generative. A bidirectional encoder (BERT, RoBERTa, XLM-R) has
encoder-only attention, for which vLLM allocates no KV cache (v1/engine/core.py:298-314, no KV
spec: no profiling, 0 bytes for the cache); a decoder-based embedder keeps its causal KV cache
and is sized as a generative model is. Either way vLLM still captures piecewise CUDA graphs
(full graphs are turned off for pooling models: config/vllm.py:1950-1960), so the graph pool
stays in the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Architectures vLLM 0.33 runs bidirectionally (encoder-only attention: no KV cache).
ENCODER_MODEL_TYPES = frozenset(
    {"bert", "roberta", "xlm-roberta", "modernbert", "nomic_bert", "new", "gte", "distilbert"}
)
# Registry entries that are pooling models whatever their suffix says (registry.py:220-345).
POOLING_ARCHITECTURES = frozenset(
    {
        "BertModel",
        "BertForMaskedLM",
        "RobertaModel",
        "RobertaForMaskedLM",
        "XLMRobertaModel",
        "ModernBertModel",
        "NomicBertModel",
        "GteModel",
        "GteNewModel",
        "BgeM3EmbeddingModel",
        "Qwen2Model",
        "LlamaModel",
        "MistralModel",
        "Gemma2Model",
        "Gemma3TextModel",
    }
)
# _SUFFIX_TO_DEFAULTS order matters: "Model" comes last so the others take priority.
_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("ForCausalLM", "generate"),
    ("ForConditionalGeneration", "generate"),
    ("ChatModel", "generate"),
    ("LMHeadModel", "generate"),
    ("ForTextEncoding", "embed"),
    ("EmbeddingModel", "embed"),
    ("ForSequenceClassification", "classify"),
    ("ForTokenClassification", "classify"),
    ("ClassificationModel", "classify"),
    ("ForRewardModeling", "embed"),
    ("RewardModel", "embed"),
    ("Model", "embed"),
)
ST_POOLING_TYPES = frozenset(
    {
        "sentence_transformers.models.Pooling",
        "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
    }
)
ST_NORMALIZE_SUFFIX = "Normalize"
# Pooling that needs the whole prompt in one step: no chunked prefill, no prefix caching
# (ModelConfig.is_chunked_prefill_supported, config/model.py:2193-2230).
WHOLE_PROMPT_POOLING = frozenset({"MEAN", "CLS"})
SEQ_POOLING = frozenset({"CLS", "LAST", "MEAN"})  # config/pooler.py:16


@dataclass(frozen=True, slots=True)
class PoolingSpec:
    """How vLLM's pooling runner serves the model (``--runner pooling --convert ...``)."""

    task: str  # "embed" or "classify"
    encoder_only: bool  # bidirectional attention: no KV cache
    convert: str  # "none": the registry's own pooling class; "embed"/"classify": an adapter
    pooling_type: str = ""  # "CLS", "MEAN", "LAST"...; "" when the model's default applies
    normalize: bool = False
    source: str = ""  # why: "modules.json" or the architecture

    @property
    def chunked_prefill(self) -> bool:
        """Whether vLLM splits a prompt over steps (no: whole prompts per batch)."""
        return not self.encoder_only and self.pooling_type not in WHOLE_PROMPT_POOLING

    @property
    def label(self) -> str:
        """What an operator reads: "embedding model" or "classification model"."""
        return "embedding model" if self.task == "embed" else "classification model"


def architecture_default(arch: str) -> str:
    """``generate``, ``embed`` or ``classify`` by vLLM's suffix rule."""
    for suffix, task in _SUFFIXES:
        if arch.endswith(suffix):
            return task
    return "generate"


def pooling_spec(
    architectures: Sequence[str],
    model_type: str,
    *,
    st_modules: Sequence[Mapping[str, Any]] | None = None,
    st_pooling: Mapping[str, Any] | None = None,
) -> PoolingSpec | None:
    """The pooling runner's view of a model, or None when vLLM would generate with it.

    ``st_modules`` is a sentence-transformers ``modules.json`` list, ``st_pooling`` its
    pooling module's ``config.json`` (``1_Pooling/config.json``)."""
    encoder = model_type in ENCODER_MODEL_TYPES
    arch = architectures[0] if architectures else ""
    default = architecture_default(arch)
    if st_modules is not None and _has_pooling_module(st_modules):
        task = "classify" if default == "classify" else "embed"
        registry_pooling = arch in POOLING_ARCHITECTURES or default != "generate"
        return PoolingSpec(
            task=task,
            encoder_only=encoder,
            convert="none" if registry_pooling else "embed",
            pooling_type=_pooling_type(st_pooling or {}),
            normalize=any(str(m.get("type", "")).endswith(ST_NORMALIZE_SUFFIX) for m in st_modules),
            source="sentence-transformers modules.json",
        )
    if arch in POOLING_ARCHITECTURES or default in ("embed", "classify"):
        task = "classify" if default == "classify" else "embed"
        return PoolingSpec(task=task, encoder_only=encoder, convert="none", source=arch)
    return None


def _has_pooling_module(modules: Sequence[Mapping[str, Any]]) -> bool:
    return any(isinstance(m, Mapping) and m.get("type") in ST_POOLING_TYPES for m in modules)


def _pooling_type(config: Mapping[str, Any]) -> str:
    """vLLM's parse of 1_Pooling/config.json (transformers_utils/config.py:1066-1106): each
    ``pooling_mode`` string or flag set true, by its first word ("lasttoken" is LAST); the last
    sequence pooling named wins."""
    found = ""
    for key, value in config.items():
        if key == "pooling_mode" and isinstance(value, str):
            name = value
        elif value is True:
            name = key
        else:
            continue
        name = name.replace("pooling_mode_", "").split("_", 1)[0]
        kind = "LAST" if "lasttoken" in name else name.upper()
        if kind in SEQ_POOLING:
            found = kind
    return found
