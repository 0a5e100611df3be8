"""The launch form: model, host, engine and the plan overrides (blank = vLLM's default)."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.conf import settings

from deployments import planning
from deployments.lifecycle import limits
from deployments.lifecycle.services import LaunchRequest
from deployments.models import Engine
from monitoring.models import Host


def _host_choices() -> list[tuple[str, str]]:
    return [
        (h.name, f"{h.name}{' (simulated)' if h.simulated else ''}")
        for h in Host.objects.in_service()
    ]


class LaunchForm(forms.Form):
    name = forms.CharField(
        max_length=limits.NAME_MAX_CHARS,
        help_text=f"{limits.NAME_RULE[0].upper()}{limits.NAME_RULE[1:]}.",
    )
    model_ref = forms.CharField(max_length=300, label="Model (Hub id or local:<root>/<path>)")
    revision = forms.CharField(max_length=100, required=False)
    host = forms.ChoiceField(choices=_host_choices)
    engine = forms.ChoiceField(choices=Engine.choices, initial=Engine.VLLM)
    tensor_parallel_size = forms.IntegerField(min_value=1, max_value=64, required=False)
    pipeline_parallel_size = forms.IntegerField(min_value=1, max_value=64, required=False)
    max_model_len = forms.IntegerField(min_value=1, required=False)
    max_num_seqs = forms.IntegerField(min_value=1, max_value=limits.MAX_NUM_SEQS, required=False)
    dtype = forms.ChoiceField(
        choices=[(v, v) for v in ("auto", "bfloat16", "float16", "float32")], initial="auto"
    )
    quantization = forms.CharField(max_length=40, required=False)
    kv_cache_dtype = forms.ChoiceField(
        choices=[(v, v) for v in ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")], initial="auto"
    )
    gpu_memory_utilization = forms.FloatField(min_value=0.05, max_value=1.0, required=False)
    auto_restart = forms.ChoiceField(
        choices=[("", "Server default"), ("on", "On"), ("off", "Off")],
        required=False,
        label="Restart the engine if it dies",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        default = "on" if settings.SHARDBOARD_AUTO_RESTART else "off"
        cast(forms.ChoiceField, self.fields["auto_restart"]).choices = [
            ("", f"Server default ({default})"),
            ("on", "On"),
            ("off", "Off"),
        ]

    def clean_name(self) -> str:
        name = str(self.cleaned_data["name"]).strip().lower()
        if problem := limits.name_problem(name):
            raise forms.ValidationError(problem)
        return name

    def launch_request(self) -> LaunchRequest:
        data = self.cleaned_data
        return LaunchRequest(
            name=data["name"],
            model_ref=data["model_ref"],
            host_name=data["host"],
            engine=data["engine"],
            revision=data["revision"],
            plan_request=planning.PlanRequest(
                tensor_parallel_size=data["tensor_parallel_size"],
                pipeline_parallel_size=data["pipeline_parallel_size"],
                max_model_len=data["max_model_len"],
                max_num_seqs=data["max_num_seqs"],
                dtype=data["dtype"],
                quantization=data["quantization"] or None,
                kv_cache_dtype=data["kv_cache_dtype"],
                gpu_memory_utilization=data["gpu_memory_utilization"],
            ),
            auto_restart={"on": True, "off": False}.get(data["auto_restart"] or ""),
        )
