"""The launch form's LoRA section: vLLM's adapter slots (--enable-lora, --max-loras,
--max-lora-rank, --max-cpu-loras). Blank numbers take vLLM's defaults once LoRA is on."""

from __future__ import annotations

from typing import Any

from django import forms

from deployments import planning

LORA_FIELDS = ("enable_lora", "max_loras", "max_lora_rank", "max_cpu_loras")
MAX_LORAS = 64  # adapters in one batch: each is a slot of stacks in GPU memory


class LoraFields(forms.Form):
    enable_lora = forms.BooleanField(
        required=False,
        label="Enable LoRA adapters",
        help_text="vLLM only: adapters load and unload on the running deployment",
    )
    max_loras = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_LORAS,
        label="Adapters in one batch (max_loras)",
        help_text=f"blank: {planning.DEFAULT_MAX_LORAS}; each is a slot in GPU memory",
    )
    max_lora_rank = forms.TypedChoiceField(
        required=False,
        coerce=int,
        empty_value=None,
        choices=[("", f"{planning.DEFAULT_MAX_LORA_RANK} (vLLM's default)")]
        + [(str(r), str(r)) for r in planning.LORA_RANKS],
        label="Largest adapter rank (max_lora_rank)",
    )
    max_cpu_loras = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=1024,
        label="Adapters kept loaded (max_cpu_loras)",
        help_text="blank: max_loras; beyond it vLLM reads the least recently used from disk again",
    )

    @property
    def lora_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in LORA_FIELDS]

    @property
    def lora_given(self) -> bool:
        return self.is_bound and bool(self.data.get("enable_lora"))

    def check_lora(self, data: dict[str, Any]) -> None:
        """vLLM's own checks of the LoRA settings, on their fields."""
        numbers = [data.get(k) for k in LORA_FIELDS[1:]]
        if not data.get("enable_lora"):
            if any(v is not None for v in numbers):
                self.add_error("enable_lora", "Enable LoRA to set its slots and rank.")
            return
        if data.get("engine") != "vllm":
            self.add_error("enable_lora", "LoRA adapters are served by vLLM only.")
            return
        lora = lora_config(data)
        try:
            lora.validate()
        except planning.PlanningError as exc:
            self.add_error("max_cpu_loras", str(exc))


def lora_config(data: dict[str, Any]) -> planning.LoraConfig:
    return planning.LoraConfig(
        max_loras=data.get("max_loras") or planning.DEFAULT_MAX_LORAS,
        max_lora_rank=data.get("max_lora_rank") or planning.DEFAULT_MAX_LORA_RANK,
        max_cpu_loras=data.get("max_cpu_loras"),
    )


def plan_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The PlanRequest's LoRA fields from the cleaned data."""
    if not data.get("enable_lora"):
        return {}
    return {
        "enable_lora": True,
        "max_loras": data.get("max_loras"),
        "max_lora_rank": data.get("max_lora_rank"),
        "max_cpu_loras": data.get("max_cpu_loras"),
    }
