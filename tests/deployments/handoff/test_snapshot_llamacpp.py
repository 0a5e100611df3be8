"""A llama.cpp plan in the snapshot: stored and read back exactly, rendered by the llama-server
adapter for the copy-paste line and the spawn alike, and built into the host's LaunchSpec."""

from __future__ import annotations

from typing import Any

import pytest

from deployments.engines import LlamaServerAdapter
from deployments.handoff.snapshot import EngineArgs, GpuSlot, PlanSnapshot, planned_command
from deployments.host import engine_control
from deployments.models import Deployment, Engine
from monitoring.models import Host

GGUF = "/models/Qwen3-8B-Q4_K_M.gguf"
PLAN = PlanSnapshot(
    engine_args=EngineArgs(
        max_model_len=16384,
        max_num_seqs=4,
        n_gpu_layers=37,
        split_mode="layer",
        tensor_split=(20.0, 17.0),
        cache_type_k="q8_0",
        cache_type_v="q8_0",
        flash_attn="on",
        ubatch=512,
    ),
    model_ref=f"local:{GGUF}",
    gpus=((GpuSlot("", 0), GpuSlot("", 1)),),
)


def test_round_trip_keeps_the_llamacpp_settings() -> None:
    stored = PLAN.to_json()
    assert stored["engine_args"]["tensor_split"] == [20.0, 17.0]  # JSON's list
    assert PlanSnapshot.from_json(stored) == PLAN


def test_copy_paste_line_and_spawn_are_one_renderer() -> None:
    line = planned_command(PLAN, "llamacpp", model=GGUF)
    assert line == (
        "llama-server", "-m", GGUF, "-c", "16384", "-kvu", "-np", "4",
        "-ngl", "37", "-sm", "layer", "-ts", "20,17",
        "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-ub", "512",
        "--fit", "off", "--metrics", "--no-ui", "--offline", "-lv", "4",
    )  # fmt: skip
    spec = PLAN.launch_spec(
        deployment_id="9", model=GGUF, port=8200, served_model_name="qwen", gpu_indices=(0, 1)
    )
    spawned = LlamaServerAdapter("llama-server").build(spec).argv
    assert spawned[3:9] == ("-a", "qwen", "--host", "127.0.0.1", "--port", "8200")
    assert (*spawned[:3], *spawned[9:]) == line


@pytest.mark.django_db
def test_the_host_builds_a_cpu_spec_on_a_simulated_host(operator: Any) -> None:
    host = Host.objects.create(name="llamahost", queue="host.llamahost", simulated=True)
    d = Deployment.objects.create(
        name="qwen-gguf",
        model_id=GGUF,
        engine=Engine.LLAMACPP,
        host=host,
        plan=PLAN.to_json(),
        created_by=operator,
    )
    spec = engine_control.launch_spec(d, 8200)
    assert spec.device == "cpu"
    assert (spec.max_model_len, spec.max_num_seqs, spec.cache_type_k) == (16384, 4, "q8_0")
    assert (spec.tensor_split, spec.n_gpu_layers, spec.split_mode) == ((), None, None)
    assert spec.api_key == d.engine_api_key()
    argv = LlamaServerAdapter("llama-server").build(spec).argv
    assert argv[argv.index("-ngl") : argv.index("-ngl") + 4] == ("-ngl", "0", "-sm", "none")
