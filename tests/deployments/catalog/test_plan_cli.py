"""The plan command: JSON contract, human output, bad input → one line and exit status 2."""

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from deployments.catalog.demo_model import demo_config
from deployments.catalog.modelfiles import ModelFilesError, read_model_folder
from deployments.catalog.plan_cli import PlanCliError, run_plan
from tests.support.planning import LLAMA_8B, fixture_config
from tests.support.processes import ROOT

QUANT_CONFIGS = Path(__file__).parents[1] / "planning" / "fixtures" / "configs"

PLAN_KEYS = {
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "replicas",
    "fits",
    "reasons",
    "warnings",
    "per_gpu",
    "kv_cache_tokens",
    "max_concurrency",
    "command",
    "engine_settings",
    "gpus",
    "replicas_asked",
    "tight",
    "tight_reasons",
    "device",
    "environment",
}
GPU_KEYS = {
    "weights_bytes",
    "activation_bytes",
    "non_torch_bytes",
    "cuda_graph_bytes",
    "kv_cache_bytes",
    "total_bytes",
}


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    return tmp_path


def test_json_contract(model_dir):
    out = json.loads(run_plan({"model": str(model_dir), "gpus": "2x80GiB", "tp": 2, "json": True}))
    assert set(out) == {"plans", "reason"}
    assert out["reason"] == "TP 2 × PP 1 is the layout you asked for."
    first = out["plans"][0]
    assert set(first) == PLAN_KEYS
    assert (first["tensor_parallel_size"], first["pipeline_parallel_size"]) == (2, 1)
    assert len(first["per_gpu"]) == 2 and all(set(g) == GPU_KEYS for g in first["per_gpu"])
    assert all(isinstance(v, int) for g in first["per_gpu"] for v in g.values())
    assert first["command"][:3] == ["vllm", "serve", str(model_dir)]
    assert first["gpus"] == [[{"host": "local", "index": 0}, {"host": "local", "index": 1}]]
    assert (first["replicas_asked"], first["tight"], first["tight_reasons"]) == (0, False, [])
    assert (first["device"], first["environment"]) == ("gpu", {})


# (--replicas, --placement) -> (replicas placed, replicas asked, host of each replica)
REPLICAS = [
    ({}, (8, 0, ["local-1", "local-2"] * 4)),
    ({"replicas": "max", "placement": "packed"}, (8, 0, ["local-1"] * 4 + ["local-2"] * 4)),
    ({"replicas": "3"}, (3, 3, ["local-1", "local-2", "local-1"])),
    ({"replicas": 3, "placement": "packed"}, (3, 3, ["local-1"] * 3)),
]


@pytest.mark.parametrize(("options", "expected"), REPLICAS)
def test_replicas_in_json(model_dir, options, expected):
    out = run_plan({"model": str(model_dir), "gpus": "2x4x80GiB", "json": True, **options})
    first = json.loads(out)["plans"][0]
    hosts = [replica[0]["host"] for replica in first["gpus"]]
    assert (first["replicas"], first["replicas_asked"], hosts) == expected


def test_a_replica_that_cannot_be_placed_in_human_output(model_dir):
    text = run_plan(
        {"model": str(model_dir), "gpus": "3x3x80GiB", "tp": 2, "replicas": "4"}
    ).splitlines()
    assert text[0].startswith("TP=2 PP=1 replicas=3 of 4 asked: does NOT fit")
    assert (
        "reason: replica 4 of 4: no host has 2 usable GPUs left for a tensor-parallel group "
        "(the most left on one host is 1)"
    ) in text
    assert "replicas on: 1 local-1:0,1 · 2 local-2:0,1 · 3 local-3:0,1" in text


def test_a_tight_plan_in_human_output(model_dir):
    text = run_plan({"model": str(model_dir), "gpus": "1x80GiB", "gpu_memory_utilization": 1.0})
    assert ": fits, TIGHT; KV cache" in text.splitlines()[0]
    assert "tight: leaves 0.00 GiB of a 80.00 GiB GPU outside gpu_memory_utilization 1" in text


def test_human_output(model_dir):
    text = run_plan({"model": str(model_dir), "gpus": "1x80GiB"})
    assert "weights" in text and "KV cache" in text and "command: vllm serve" in text


def test_human_output_says_what_each_gpu_keeps_free(model_dir):
    text = run_plan(
        {"model": str(model_dir), "gpus": "1x80GiB", "concurrency": 8, "max_model_len": 4096}
    )
    shares = [line for line in text.splitlines() if line.startswith("share: ")]
    assert shares[0].startswith("share: Sized for 8 requests of 4,096 tokens at once")
    assert "--gpu-memory-utilization 0.28 rather than the whole GPU" in shares[0]
    assert shares[1] == (
        "share: Reserves 22.4 GiB of GPU 0 (80 GiB); 57.6 GiB stays free for other deployments."
    )
    assert "--gpu-memory-utilization 0.28 " in text


@pytest.mark.parametrize(
    "options",
    [
        {"model": "/no/such/folder", "gpus": "1x80GiB"},
        {"gpus": "1x80GiB", "max_model_len": 0},
        {"gpus": "banana"},
        {"gpus": "1x80GiB", "vllm_version": "x"},
        {"gpus": "1x80GiB", "replicas": "banana"},
        {"gpus": "1x80GiB", "replicas": "0"},
        {"gpus": "1x80GiB", "replicas": "-2"},
        {"gpus": "1x80GiB", "placement": "diagonal"},
        {"gpus": "1x80GiB", "decode_context_parallel_size": 0},
    ],
)
def test_bad_input_is_one_line(model_dir, options):
    with pytest.raises(PlanCliError) as err:
        run_plan({"model": str(model_dir), **options})
    assert "\n" not in str(err.value)


def test_unknown_architecture_fields(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mystery"}))
    with pytest.raises(PlanCliError, match="hidden_size"):
        run_plan({"model": str(tmp_path), "gpus": "1x80GiB"})


def test_unreadable_json(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(PlanCliError, match="unreadable JSON"):
        run_plan({"model": str(tmp_path), "gpus": "1x80GiB"})


def write_safetensors(path: Path, tensors: dict) -> None:
    header = json.dumps(tensors).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)


def test_safetensors_headers_and_index(model_dir):
    write_safetensors(
        model_dir / "model-1.safetensors",
        {
            "__metadata__": {"format": "pt"},
            "model.embed_tokens.weight": {
                "dtype": "BF16",
                "shape": [10, 4],
                "data_offsets": [0, 80],
            },
            "vision_tower.proj.weight": {"dtype": "F16", "shape": [3, 3], "data_offsets": [80, 98]},
        },
    )
    (model_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 98}, "weight_map": {}})
    )
    _, summary = read_model_folder(model_dir)
    assert summary is not None
    assert dict(summary.parameter_counts) == {"BF16": 40, "F16": 9}
    assert (summary.vision_parameters, summary.total_bytes) == (9, 98)


def test_bad_safetensors_header(model_dir):
    (model_dir / "x.safetensors").write_bytes(b"\xff" * 4)
    with pytest.raises(ModelFilesError, match="safetensors"):
        read_model_folder(model_dir)


def manage(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "plan", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(not (ROOT / "manage.py").exists(), reason="no manage.py yet")
def test_manage_py_json(model_dir):
    done = manage(str(model_dir), "--gpus", "2x79.19GiB", "--tp", "1", "--pp", "2", "--json")
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)["plans"][0]
    assert (first["pipeline_parallel_size"], len(first["per_gpu"])) == (2, 2)


@pytest.mark.skipif(not (ROOT / "manage.py").exists(), reason="no manage.py yet")
@pytest.mark.parametrize(
    "args",
    [
        ("/no/such/folder", "--gpus", "1x80GiB"),
        ("x", "--tp", "two"),
        ("x", "--gpus", "?"),
        ("x", "--gpus", "1x80GiB", "--replicas", "some"),
        ("x", "--gpus", "1x80GiB", "--placement", "diagonal"),
    ],
)
def test_manage_py_bad_input_exits_2(args):
    done = manage(*args)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(not (ROOT / "manage.py").exists(), reason="no manage.py yet")
def test_call_command(model_dir):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("plan", str(model_dir), gpus="1x80GiB", json=True, stdout=out)
    assert json.loads(out.getvalue())["plans"][0]["fits"] is True


def test_local_folder_reads_hf_quant_config_beside_config_json(tmp_path):
    name = "nvidia--Qwen3-235B-A22B-NVFP4"
    (tmp_path / "config.json").write_text((QUANT_CONFIGS / f"{name}_config.json").read_text())
    quant = (QUANT_CONFIGS / f"{name}_hf_quant_config.json").read_text()
    (tmp_path / "hf_quant_config.json").write_text(quant)
    cfg, _ = read_model_folder(tmp_path)
    assert cfg["quantization_config"]["quantization"]["quant_algo"] == "NVFP4"
    args = {"model": str(tmp_path), "gpus": "4x80GiB", "tp": 4, "max_model_len": 8192}
    best = json.loads(run_plan({**args, "json": True}))["plans"][0]
    assert best["fits"] and 30 << 30 <= best["per_gpu"][0]["weights_bytes"] <= 33 << 30


def test_decode_context_parallel_in_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(fixture_config("deepseek-ai--DeepSeek-V3")))
    options = {"model": str(tmp_path), "gpus": "8x141GiB", "tp": 8, "max_model_len": 32768}
    base = json.loads(run_plan({**options, "json": True}))["plans"][0]
    dcp = json.loads(run_plan({**options, "json": True, "decode_context_parallel_size": 4}))
    best = dcp["plans"][0]
    assert best["fits"]
    assert best["command"][best["command"].index("--decode-context-parallel-size") + 1] == "4"
    assert 3.9 < best["kv_cache_tokens"] / base["kv_cache_tokens"] <= 4.0
    refused = json.loads(run_plan({**options, "json": True, "decode_context_parallel_size": 3}))
    assert refused["plans"][0]["reasons"][0] == "tp_size=8 must be divisible by dcp_size=3."


def test_human_output_notes_the_layer_kinds(tmp_path, model_dir):
    oss = tmp_path / "gpt-oss"
    oss.mkdir()
    (oss / "config.json").write_text(json.dumps(fixture_config("openai--gpt-oss-20b")))
    text = run_plan({"model": str(oss), "gpus": "1x80GiB", "max_model_len": 8192})
    assert "\nnote: window-sized KV for local layers: 12 of 24 layers" in text
    assert "note:" not in run_plan({"model": str(model_dir), "gpus": "1x80GiB"})


def test_a_cpu_plan_from_the_cli(model_dir):
    (model_dir / "config.json").write_text(json.dumps(demo_config()))
    options = {"model": str(model_dir), "cpu": "2x16GiB", "tp": 2, "kv_cache_bytes": 2**27}
    out = json.loads(run_plan({**options, "json": True}))
    first = out["plans"][0]
    assert (first["device"], first["fits"], first["kv_cache_tokens"]) == ("cpu", True, 262144)
    assert first["environment"] == {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    flags = first["command"]
    assert flags[flags.index("--kv-cache-memory-bytes") + 1] == str(2**27)
    text = run_plan(options)
    assert "CPU TP=2 replicas=1: fits; KV cache 262144 tokens" in text
    assert f"command: VLLM_CPU_OMP_THREADS_BIND='0|1' vllm serve {model_dir}" in text
    refused = run_plan({**options, "sleep_mode": True})
    assert "does NOT fit" in refused and "Sleep mode is not supported" in refused
    with pytest.raises(PlanCliError, match="unreadable CPU"):
        run_plan({**options, "cpu": "lots"})
