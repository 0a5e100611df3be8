"""The launch form: model, host, engine, the plan overrides (blank = vLLM's default) and an
optional scaling policy (blank = the replica count stays as launched)."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.conf import settings

from deployments import planning
from deployments.lifecycle import idle, launch_policy, limits
from deployments.lifecycle.gguf_form import LlamaCppFields, gguf_options
from deployments.lifecycle.lora_form import LORA_FIELDS, LoraFields, plan_fields
from deployments.lifecycle.placement import LAUNCHABLE_ENGINES
from deployments.lifecycle.policy import POLICY_FIELDS
from deployments.lifecycle.policy_form import PolicyFields
from deployments.lifecycle.services import LaunchRequest
from deployments.models import Engine
from deployments.planning.search.request import MAX_REPLICAS
from monitoring.models import Host


def _host_choices() -> list[tuple[str, str]]:
    return [
        (h.name, f"{h.name}{' (simulated)' if h.simulated else ''}")
        for h in Host.objects.in_service()
    ]


class LaunchForm(LlamaCppFields, LoraFields, PolicyFields):
    name = forms.CharField(
        max_length=limits.NAME_MAX_CHARS,
        help_text=f"{limits.NAME_RULE[0].upper()}{limits.NAME_RULE[1:]}.",
    )
    model_ref = forms.CharField(
        max_length=300,
        label="Model (Hub id, local:<root>/<path>, or a local .gguf file for llama.cpp)",
    )
    revision = forms.CharField(max_length=100, required=False)
    host = forms.ChoiceField(choices=_host_choices)
    engine = forms.ChoiceField(
        choices=[(e.value, e.label) for e in LAUNCHABLE_ENGINES], initial=Engine.VLLM
    )
    device = forms.ChoiceField(
        choices=[("gpu", "the host's GPUs"), ("cpu", "the host's CPU (vLLM's CPU build)")],
        initial="gpu",
        required=False,
        label="Device",
        help_text="the CPU: vLLM runs on the host's cores, its weights and KV space in RAM",
    )
    kv_cache_bytes = forms.IntegerField(
        min_value=1,
        max_value=1 << 46,
        required=False,
        label="KV space on the CPU (bytes, each rank)",
        help_text="blank: chosen from the host's free RAM with a margin",
    )
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
    concurrency = forms.IntegerField(
        min_value=1,
        max_value=100_000,
        required=False,
        label="Full-length requests at once",
        help_text="sizes this deployment's share of each GPU; blank: 92 % of each GPU",
    )
    replicas = forms.CharField(
        max_length=5,
        required=False,
        initial="1",
        label="Replicas",
        help_text="how many copies of the layout, each its own engine; max: as many as fit",
    )
    placement = forms.ChoiceField(
        choices=[(v, v) for v in planning.PLACEMENTS],
        required=False,
        initial="spread",
        label="Replica placement",
    )
    hosts = forms.MultipleChoiceField(
        choices=_host_choices,
        required=False,
        label="Further hosts",
        help_text="one replica over these hosts too (pipeline stages across them, vLLM on Ray)",
    )
    learned_correction = forms.ChoiceField(
        choices=[("on", "Applied where the fleet learned one"), ("off", "Off")],
        required=False,
        label="Planner correction learned from recorded starts",
    )
    auto_restart = forms.ChoiceField(
        choices=[("", "Server default"), ("on", "On"), ("off", "Off")],
        required=False,
        label="Restart the engine if it dies",
    )

    sleep_after_min = forms.FloatField(
        required=False,
        min_value=idle.MIN_SLEEP_AFTER_S / 60,
        max_value=idle.MAX_SLEEP_AFTER_S / 60,
        label="Sleep after (minutes idle)",
        help_text="blank: never. vLLM on GPUs sleeps (freeing most of their memory); an engine "
        "that cannot sleep (vLLM on the CPU, transformers, llama.cpp) scales to zero and starts "
        "again on the next request",
    )
    team = forms.ChoiceField(choices=[("", "your only team")], required=False, label="Team")

    def __init__(self, *args: Any, teams: list[str] | None = None, **kwargs: Any) -> None:
        """`teams`: the teams the user may launch for (an admin: every team)."""
        super().__init__(*args, **kwargs)
        names = teams or []
        first = "your only team" if len(names) <= 1 else "choose a team"
        cast(forms.ChoiceField, self.fields["team"]).choices = [("", first)] + [
            (n, n) for n in names
        ]
        default = "on" if settings.SHARDBOARD_AUTO_RESTART else "off"
        cast(forms.ChoiceField, self.fields["auto_restart"]).choices = [
            ("", f"Server default ({default})"),
            ("on", "On"),
            ("off", "Off"),
        ]

    @property
    def other_fields(self) -> list[forms.BoundField]:
        return [f for f in super().other_fields if f.name not in LORA_FIELDS]

    def clean_replicas(self) -> int | None:
        """A whole number from 1 (blank: 1), or ``max`` (None: as many as fit)."""
        text = str(self.cleaned_data["replicas"] or "1").strip().lower()
        if text in ("max", "all"):
            return None
        if not text.isdigit() or not 1 <= int(text) <= MAX_REPLICAS:
            raise forms.ValidationError(
                f"Give a number of replicas from 1 to {MAX_REPLICAS:,}, or max."
            )
        return int(text)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        self.check_lora(data)
        if set(self.errors) & {"replicas", "hosts", *POLICY_FIELDS}:
            return data  # the policy is checked whole, once each of its fields is clear
        hosts = data.get("hosts") or ()
        policy = launch_policy.from_form(data, replicas=data.get("replicas"), hosts=hosts)
        if isinstance(policy, launch_policy.Refusal):
            field, message = policy
            self.add_error(field or None, message if field else f"Autoscaling: {message}")
        else:
            data["scaling_policy"] = policy
        return data

    def clean_kv_cache_bytes(self) -> int | None:
        given = self.cleaned_data.get("kv_cache_bytes")
        if given is not None and self.data.get("device") != "cpu":
            raise forms.ValidationError("The KV space is given for the CPU device only.")
        return given

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
                concurrency=data["concurrency"],
                placement=data["placement"] or "spread",
                learned_correction=data["learned_correction"] != "off",
                device=data.get("device") or "gpu",
                kv_cache_bytes=data.get("kv_cache_bytes"),
                **plan_fields(data),
            ),
            replicas=data["replicas"],
            hosts=tuple(data.get("hosts") or ()),
            auto_restart={"on": True, "off": False}.get(data["auto_restart"] or ""),
            team=data.get("team") or None,
            gpu_indices=data.get("gpus"),
            llamacpp=gguf_options(data) if data["engine"] == Engine.LLAMACPP else None,
            sleep_after_s=idle.minutes_to_s(data.get("sleep_after_min")),
            scaling_policy=data.get("scaling_policy"),
        )
