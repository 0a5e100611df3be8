"""The copy-paste lines of a GGUF plan: llama-server itself and its docker run."""

from __future__ import annotations

import shlex

from deployments.catalog.commands import command_blocks, llama_argv, llama_docker_line
from deployments.handoff.snapshot import EngineArgs, GpuSlot, PlanSnapshot

ALL = "0.0.0.0"  # noqa: S104 - the container's listen address, nothing binds here
GGUF = "/srv/models/Qwen3-8B-Q4_K_M.gguf"
PLAN = PlanSnapshot(
    engine_args=EngineArgs(
        max_model_len=8192, max_num_seqs=2, n_gpu_layers=37, tensor_split=(20.0, 17.0)
    )
)
# fmt: off
FLAGS = [
    "-c", "8192", "-kvu", "-np", "2", "-ngl", "37", "-sm", "layer", "-ts", "20,17",
    "-fa", "auto", "--fit", "off", "--metrics", "--no-ui", "--offline", "-lv", "4",
]


def test_llama_server_line() -> None:
    assert llama_argv(PLAN, GGUF) == ["llama-server", "-m", GGUF, *FLAGS]


def test_docker_line_on_two_gpus() -> None:
    line = llama_docker_line(llama_argv(PLAN, GGUF), GGUF, (0, 1))
    assert shlex.split(line) == [
        "docker", "run", "--rm", "--gpus", '"device=0,1"', "-p", "8080:8080",
        "-v", "/srv/models:/models:ro", "--env", "LLAMA_API_KEY",
        "ghcr.io/ggml-org/llama.cpp:server-cuda",
        "-m", "/models/Qwen3-8B-Q4_K_M.gguf", *FLAGS, "--host", ALL, "--port", "8080",
    ]
# fmt: on


def test_docker_line_on_the_cpu_uses_the_cpu_image() -> None:
    line = llama_docker_line(["llama-server", "-m", "tiny.gguf", "-ngl", "0"], "tiny.gguf", ())
    assert "--gpus" not in line
    assert "ghcr.io/ggml-org/llama.cpp:server " in line
    assert "-v .:/models:ro" in line


def test_blocks_of_a_gguf_plan() -> None:
    payload = {"plan": {"commands": {"llamacpp": "llama-server …", "docker": "docker run …"}}}
    assert command_blocks(payload) == [
        ("llamacpp", "llama-server", "llama-server …"),
        ("docker", "docker run", "docker run …"),
    ]
    assert [b[0] for b in command_blocks({"plan": {"commands": {}}})] == [
        "vllm",
        "docker",
        "kubernetes",
    ]


def test_an_even_split_over_the_plans_gpus_when_none_is_pinned() -> None:
    plan = PlanSnapshot(
        engine_args=EngineArgs(max_model_len=4096),
        gpus=((GpuSlot("", 1), GpuSlot("", 2), GpuSlot("", 3)),),
    )
    argv = llama_argv(plan, GGUF)
    assert argv[argv.index("-sm") : argv.index("-sm") + 4] == ["-sm", "layer", "-ts", "1,1,1"]
