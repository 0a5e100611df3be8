"""The launch form's llama.cpp fields: what the GGUF plan panel chose, posted with Launch.

Blank, they leave the launch to plan as `gguf_launch` does without them (-c and -np from the
form's context and sequences, f16 cache, the planner's split over the host's free GPUs).
"""

from __future__ import annotations

from typing import Any

from django import forms

from deployments import planning
from deployments.catalog.gguf_plan import CACHE_TYPES, GgufOptions, parse_tensor_split

LLAMA_FIELDS = (
    "cache_type_k",
    "cache_type_v",
    "flash_attn",
    "split_mode",
    "tensor_split",
    "allow_partial_offload",
)


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [("", "the planner's default"), *((v, v) for v in values)]


class LlamaCppFields(forms.Form):
    gpus = forms.CharField(
        max_length=200,
        required=False,
        label="GPUs (indices, e.g. 0,1; blank: the host's free ones)",
    )
    cache_type_k = forms.ChoiceField(
        choices=_choices(CACHE_TYPES), required=False, label="llama.cpp K cache (-ctk)"
    )
    cache_type_v = forms.ChoiceField(
        choices=_choices(CACHE_TYPES), required=False, label="llama.cpp V cache (-ctv)"
    )
    flash_attn = forms.ChoiceField(
        choices=_choices(("on", "off")), required=False, label="llama.cpp flash attention (-fa)"
    )
    split_mode = forms.ChoiceField(
        choices=_choices(("layer", "row")), required=False, label="llama.cpp split mode (-sm)"
    )
    tensor_split = forms.CharField(
        max_length=100,
        required=False,
        label="llama.cpp tensor split (-ts, e.g. 3,2; blank: the planner's)",
    )
    allow_partial_offload = forms.BooleanField(
        required=False, label="llama.cpp: layers may stay on the CPU (-ngl below the count)"
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("gpus", *LLAMA_FIELDS):  # after the launch form's own fields
            self.fields[name] = self.fields.pop(name)

    def clean_gpus(self) -> tuple[int, ...] | None:
        text = str(self.cleaned_data.get("gpus") or "").replace(" ", "")
        if not text:
            return None
        parts = text.split(",")
        if not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
            raise forms.ValidationError("GPU indices as 0,1: whole numbers, each once.")
        return tuple(int(p) for p in parts)

    def clean_tensor_split(self) -> tuple[float, ...] | None:
        try:
            return parse_tensor_split(str(self.cleaned_data.get("tensor_split") or ""))
        except planning.PlanningError as exc:
            raise forms.ValidationError(str(exc)) from exc


def gguf_options(data: dict[str, Any]) -> GgufOptions | None:
    """The panel's llama.cpp settings, or None where none was given (the launch's defaults)."""
    if not any(data.get(name) for name in LLAMA_FIELDS):
        return None
    kv = data.get("kv_cache_dtype")
    cache = kv if kv in CACHE_TYPES else "f16"
    return GgufOptions(
        context_tokens=data.get("max_model_len") or 0,
        slots=data.get("max_num_seqs") or 1,
        cache_type_k=data.get("cache_type_k") or cache,
        cache_type_v=data.get("cache_type_v") or cache,
        flash_attn=(data.get("flash_attn") or "on") == "on",
        split_mode=data.get("split_mode") or "layer",
        tensor_split=data.get("tensor_split"),
        allow_partial_offload=bool(data.get("allow_partial_offload")),
    )
