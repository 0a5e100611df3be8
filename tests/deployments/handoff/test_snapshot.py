"""PlanSnapshot: the typed plan a launch writes and the host reads.

Round trip, rows written before it (version 1) still load, the copy-paste command and the
spawned argv come from one renderer, and the host takes utilization from the snapshot."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from deployments import planning
from deployments.catalog.demo_model import demo_config
from deployments.engines import LaunchSpec, VllmAdapter, planned_argv
from deployments.handoff.snapshot import (
    VERSION,
    EngineArgs,
    GpuSlot,
    PlanSnapshot,
    SnapshotError,
    from_plan,
    planned_command,
)
from deployments.host import engine_control
from deployments.models import Deployment, Engine
from monitoring.models import Host

GIB = 2**30

# A row's plan exactly as the launch service wrote it before PlanSnapshot (version 1).
V1_ROW: dict[str, Any] = {
    "tensor_parallel_size": 2,
    "pipeline_parallel_size": 1,
    "replicas": 2,
    "fits": True,
    "reasons": [],
    "warnings": ["a warning"],
    "per_gpu": [
        {
            "weights_bytes": 7 * GIB,
            "activation_bytes": GIB,
            "non_torch_bytes": GIB // 2,
            "cuda_graph_bytes": GIB // 4,
            "kv_cache_bytes": 20 * GIB,
            "total_bytes": 29 * GIB,
            "gpu_total_bytes": 80 * GIB,
            "budget_bytes": 30 * GIB,
            "free_bytes": 80 * GIB,
        }
    ]
    * 2,
    "kv_cache_tokens": 305855,
    "max_concurrency": 37.34,
    "command": [
        "vllm",
        "serve",
        "Qwen/Qwen2.5-7B-Instruct",
        "--revision",
        "abc123",
        "--tensor-parallel-size",
        "2",
        "--pipeline-parallel-size",
        "1",
        "--gpu-memory-utilization",
        "0.37",
        "--max-model-len",
        "8192",
        "--max-num-seqs",
        "64",
        "--max-num-batched-tokens",
        "4096",
        "--dtype",
        "bfloat16",
        "--block-size",
        "32",
        "--enforce-eager",
    ],
    "gpus": [[{"host": "gpu-a", "index": 2}, {"host": "gpu-a", "index": 3}]],
    "replicas_asked": 2,
    "tight": False,
    "tight_reasons": [],
    "max_model_len": 8192,
    "multi_host": False,
    "context_clipped": False,
    "requested_max_model_len": 32768,
    "model_ref": "Qwen/Qwen2.5-7B-Instruct",
    "request": {"replicas": 2, "placement": "packed", "dtype": "bfloat16"},
    "retired": True,
}


def test_old_rows_load_as_version_1() -> None:
    plan = PlanSnapshot.from_json(V1_ROW)
    assert plan.engine_args == EngineArgs(
        tensor_parallel_size=2,
        pipeline_parallel_size=1,
        gpu_memory_utilization=0.37,
        max_model_len=8192,
        max_num_seqs=64,
        max_num_batched_tokens=4096,
        dtype="bfloat16",
        block_size=32,
        enforce_eager=True,
    )
    assert plan.gpus == ((GpuSlot("gpu-a", 2), GpuSlot("gpu-a", 3)),)
    assert plan.gpu_indices == (2, 3) and plan.engine_args.gpus_per_replica == 2
    assert plan.per_gpu[0].total_bytes == 29 * GIB and plan.per_gpu[1].budget_bytes == 30 * GIB
    assert (plan.kv_cache_tokens, plan.max_concurrency) == (305855, 37.34)
    assert plan.model_ref == "Qwen/Qwen2.5-7B-Instruct" and plan.request["placement"] == "packed"
    assert plan.context_clipped and plan.warnings == ("a warning",)


def test_oldest_rows_without_figures_load() -> None:
    plan = PlanSnapshot.from_json({})
    assert plan.engine_args == EngineArgs() and plan.gpus == () and plan.model_ref == ""
    assert plan.kv_cache_tokens is None and plan.max_concurrency is None


def test_round_trip_is_exact() -> None:
    plan = PlanSnapshot.from_json(V1_ROW)
    stored = plan.to_json()
    assert stored["version"] == VERSION
    assert PlanSnapshot.from_json(stored) == plan
    assert "command" not in stored and "retired" not in stored and "multi_host" not in stored


def test_round_trip_of_a_fresh_plan() -> None:
    spec = planning.ModelSpec.from_config(demo_config())
    req = planning.PlanRequest(model="org/tiny", concurrency=4)
    best = planning.plan(spec, planning.parse_gpus("2x24GiB"), req).plans[0]
    plan = from_plan(best, model_ref="org/tiny", request={"concurrency": 4})
    assert PlanSnapshot.from_json(plan.to_json()) == plan
    assert plan.engine_args.gpu_memory_utilization is not None
    assert plan.engine_args.gpu_memory_utilization < 0.92  # sized for the stated load
    assert plan.engine_args.max_model_len == best.max_model_len


def test_a_newer_version_is_refused_not_guessed() -> None:
    with pytest.raises(SnapshotError):
        PlanSnapshot.from_json({**PlanSnapshot.from_json(V1_ROW).to_json(), "version": 99})


LISTEN = {"--served-model-name", "--host", "--port"}


def _without_listen(argv: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in LISTEN:
            skip = True
        else:
            out.append(arg)
    return tuple(out)


def test_golden_copy_paste_line_and_spawn_are_one_renderer() -> None:
    plan = PlanSnapshot.from_json(V1_ROW)
    line = planned_command(plan, "vllm", model="Qwen/Qwen2.5-7B-Instruct", revision="abc123")
    assert line == (
        "vllm", "serve", "Qwen/Qwen2.5-7B-Instruct",
        "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1",
        "--revision", "abc123", "--gpu-memory-utilization", "0.37", "--max-model-len", "8192",
        "--max-num-seqs", "64", "--max-num-batched-tokens", "4096", "--dtype", "bfloat16",
        "--block-size", "32", "--enforce-eager",
    )  # fmt: skip
    spec = plan.launch_spec(
        deployment_id="7",
        model="Qwen/Qwen2.5-7B-Instruct",
        revision="abc123",
        port=8123,
        served_model_name="qwen",
        gpu_indices=(2, 3),
        api_key="secret",
    )
    spawned = VllmAdapter(executable="vllm").build(spec).argv
    assert spawned[3:9] == ("--served-model-name", "qwen", "--host", "127.0.0.1", "--port", "8123")
    assert _without_listen(spawned) == line == planned_argv("vllm", spec)
    assert "secret" not in " ".join(spawned)  # the key travels in the environment


def test_utilization_is_printed_exactly() -> None:
    spec = LaunchSpec(deployment_id="1", model="m", port=1, gpu_indices=(0,))
    odd = VllmAdapter("vllm").argv(
        LaunchSpec(**{**_fields(spec), "gpu_memory_utilization": 0.123456789})
    )
    assert odd[odd.index("--gpu-memory-utilization") + 1] == "0.123456789"


def _fields(spec: LaunchSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in spec.__dataclass_fields__}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("plan_json", "expected"),
    [
        (PlanSnapshot.from_json(V1_ROW).to_json(), 0.37),  # version 2
        ({**V1_ROW, "command": [*V1_ROW["command"][:10], "0.55", *V1_ROW["command"][11:]]}, 0.55),
    ],
)
def test_the_host_takes_utilization_from_the_snapshot(
    operator: Any, plan_json: dict[str, Any], expected: float
) -> None:
    # GPUs of its own: on simulated ones vLLM runs on the CPU with a KV cache in bytes instead
    host = Host.objects.create(name="snaphost", queue="host.snaphost", simulated=False)
    d = Deployment.objects.create(
        name="snap",
        model_id="Qwen/Qwen2.5-7B-Instruct",
        engine=Engine.VLLM,
        host=host,
        plan=plan_json,
        created_by=operator,
    )
    spec = engine_control.launch_spec(d, 8123)
    assert spec.gpu_memory_utilization == expected
    assert spec.max_num_seqs == 64 and spec.max_model_len == 8192
    assert d.snapshot.engine_args.gpu_memory_utilization == expected


@pytest.mark.django_db
def test_the_migration_fills_the_columns_from_old_rows(operator: Any) -> None:
    from django.apps import apps

    # Rows as the launch wrote them before the columns: the flags were plan keys.
    migration = importlib.import_module(
        "deployments.migrations.0010_deployment_spans_hosts_retired"
    )
    host = Host.objects.create(name="oldhost", queue="host.oldhost", simulated=True)
    spans = Deployment.objects.create(
        name="old-span",
        model_id="m",
        engine=Engine.VLLM,
        host=host,
        plan={**V1_ROW, "multi_host": True, "retired": False},
        created_by=operator,
    )
    gone = Deployment.objects.create(
        name="old-gone",
        model_id="m",
        engine=Engine.VLLM,
        host=host,
        plan={**V1_ROW, "multi_host": False, "retired": True},
        created_by=operator,
    )
    plain = Deployment.objects.create(
        name="old-plain",
        model_id="m",
        engine=Engine.VLLM,
        host=host,
        plan={k: v for k, v in V1_ROW.items() if k not in ("multi_host", "retired")},
        created_by=operator,
    )
    migration.fill_from_plan(apps, None)
    for row in (spans, gone, plain):
        row.refresh_from_db()
    assert (spans.spans_hosts, spans.retired) == (True, False)
    assert (gone.spans_hosts, gone.retired) == (False, True)
    assert (plain.spans_hosts, plain.retired) == (False, False)


def test_a_cpu_plan_travels_to_the_engine_spec() -> None:
    spec = planning.ModelSpec.from_config(
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "vocab_size": 384,
            "max_position_embeddings": 512,
            "dtype": "float32",
        }
    )
    cpu = planning.Cpu("cpu", cores=2, total_bytes=16 * GIB, free_bytes=12 * GIB, index=1000)
    inv = planning.Inventory((planning.Host("h", (), cpu=cpu),))
    request = planning.PlanRequest(device="cpu", tensor_parallel_size=2, kv_cache_bytes=2**27)
    p = planning.plan(spec, inv, request).plans[0]
    snap = PlanSnapshot.from_json(from_plan(p, model_ref="local:demo").to_json())
    e = snap.engine_args
    assert (e.device, e.kv_cache_memory_bytes, e.cpu_threads_bind) == ("cpu", 2**27, "0|1")
    assert e.gpu_memory_utilization is None and snap.gpu_indices == (1000,)
    launch = snap.launch_spec(deployment_id="1", model="/m", port=8000)
    assert (launch.device, launch.kv_cache_memory_bytes, launch.cpu_threads_bind) == (
        "cpu",
        2**27,
        "0|1",
    )
    line = planned_command(snap, "vllm", model="/m")
    assert line[line.index("--kv-cache-memory-bytes") + 1] == str(2**27)
    assert "--gpu-memory-utilization" not in line


def test_rows_from_before_the_cpu_device_are_gpu_rows() -> None:
    row = PlanSnapshot.from_json(V1_ROW).to_json()
    for key in ("device", "kv_cache_memory_bytes", "cpu_threads_bind"):
        del row["engine_args"][key]
    e = PlanSnapshot.from_json(row).engine_args
    assert (e.device, e.kv_cache_memory_bytes, e.cpu_threads_bind) == ("gpu", None, None)
    assert (
        PlanSnapshot.from_json(row).launch_spec(deployment_id="1", model="m", port=1).device
        == "cuda"
    )
