"""LoRA at launch: the plan's settings through the snapshot into vLLM's command, the launch
form's rules, and the engines that have no adapters refusing it."""

from __future__ import annotations

from typing import Any

import pytest

from deployments import planning
from deployments.engines import LaunchSpec, TransformersAdapter, UnsupportedSpec, VllmAdapter
from deployments.handoff.snapshot import PlanSnapshot, from_plan, planned_command
from deployments.lifecycle.forms import LaunchForm
from tests.deployments.planning.test_lora import DEMO


def lora_plan() -> planning.Plan:
    spec = planning.ModelSpec.from_config(DEMO)
    request = planning.PlanRequest(
        dtype="bfloat16", enable_lora=True, max_loras=2, max_lora_rank=8, max_cpu_loras=4
    )
    return planning.plan(spec, planning.parse_gpus("1x24GiB"), request).plans[0]


def test_the_planned_command_carries_the_lora_flags() -> None:
    snapshot = PlanSnapshot.from_json(from_plan(lora_plan(), model_ref="local:0/demo").to_json())
    args = snapshot.engine_args
    assert (args.enable_lora, args.max_loras, args.max_lora_rank, args.max_cpu_loras) == (
        True,
        2,
        8,
        4,
    )
    assert snapshot.per_gpu[0].lora_bytes == 163_840
    argv = planned_command(snapshot, "vllm", model="/models/demo")
    tail = argv[argv.index("--max-loras") :]
    assert tail[:6] == ("--max-loras", "2", "--max-lora-rank", "8", "--max-cpu-loras", "4")
    assert "--enable-lora" in argv


def test_vllm_gets_runtime_lora_updating_only_with_lora() -> None:
    spec = dict(deployment_id="1", model="/m", port=8000, device="cpu")
    with_lora = VllmAdapter("vllm").build(LaunchSpec(**spec, enable_lora=True))
    plain = VllmAdapter("vllm").build(LaunchSpec(**spec))  # type: ignore[arg-type]
    assert with_lora.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in plain.env
    assert "--enable-lora" not in plain.argv and "--max-loras" not in plain.argv


@pytest.mark.parametrize("flag", ["--enable-lora", "--max-loras=4", "--lora-modules"])
def test_lora_flags_are_the_panels(flag: str) -> None:
    spec = LaunchSpec(deployment_id="1", model="/m", port=8000, device="cpu", extra_args=(flag,))
    with pytest.raises(UnsupportedSpec, match="not allowed"):
        VllmAdapter("vllm").build(spec)


def test_an_engine_without_adapters_refuses_lora() -> None:
    spec = LaunchSpec(deployment_id="1", model="/m", port=8000, device="cpu", enable_lora=True)
    with pytest.raises(UnsupportedSpec, match="serves no LoRA adapters"):
        TransformersAdapter("transformers").build(spec)


def form(**fields: Any) -> LaunchForm:
    data = {"name": "demo", "model_ref": "local:0/demo", "host": "h", "engine": "vllm"}
    data |= {"dtype": "auto", "kv_cache_dtype": "auto", **fields}
    f = LaunchForm(data)
    f.fields["host"].choices = [("h", "h")]  # type: ignore[attr-defined]
    return f


@pytest.mark.django_db
def test_the_launch_form_turns_lora_on_with_its_slots() -> None:
    f = form(enable_lora="on", max_loras="3", max_lora_rank="16")
    assert f.is_valid(), f.errors
    request = f.launch_request().plan_request
    assert (request.enable_lora, request.max_loras, request.max_lora_rank) == (True, 3, 16)
    assert request.lora == planning.LoraConfig(3, 16, None)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"max_loras": "2"}, "enable_lora", "Enable LoRA to set its slots"),
        ({"enable_lora": "on", "engine": "llamacpp"}, "enable_lora", "vLLM only"),
        ({"enable_lora": "on", "max_lora_rank": "12"}, "max_lora_rank", "Select a valid choice"),
        (
            {"enable_lora": "on", "max_loras": "4", "max_cpu_loras": "2"},
            "max_cpu_loras",
            "must be >= max_loras",
        ),
    ],
)
def test_the_launch_form_refuses_lora_settings_vllm_refuses(
    fields: dict[str, str], field: str, words: str
) -> None:
    f = form(**fields)
    assert not f.is_valid()
    assert words in " ".join(f.errors[field])
