"""Golden `vllm serve` argv and environment of a two-host plan, checked against vLLM 0.33.

vLLM itself is never installed; what its 0.33.0 wheel accepts was read from its sources
(/work/vllm-src/src/vllm, paths below) and is written here, so that the check runs anywhere.
Also the `ray start` lines of the two nodes, against Ray's own CLI (installed: the dev extra).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from deployments.engines import LaunchSpec, VllmAdapter
from deployments.host import engine_spec
from deployments.host.downloads import fetching
from deployments.host.ray import commands
from deployments.models import Deployment

# flag -> where vLLM 0.33.0 defines it (a parser of `vllm serve`)
VLLM_033_SERVE_FLAGS = {
    "--served-model-name": "engine/arg_utils.py:1031",
    "--host": "entrypoints/common/cli_args.py:293 (FrontendArgs.host)",
    "--port": "entrypoints/common/cli_args.py:295 (FrontendArgs.port)",
    "--tensor-parallel-size": "engine/arg_utils.py:1209",
    "--pipeline-parallel-size": "engine/arg_utils.py:1171",
    "--distributed-executor-backend": "engine/arg_utils.py:1167",
    "--gpu-memory-utilization": "engine/arg_utils.py:1389",
    "--max-model-len": "engine/arg_utils.py:991",
    "--max-num-seqs": "engine/arg_utils.py:1754",
    "--dtype": "engine/arg_utils.py:977",
    "--revision": "engine/arg_utils.py:986",
}
# config/parallel.py:38: DistributedExecutorBackend = Literal["ray", "mp", "uni", ...]
VLLM_033_BACKENDS = ("ray", "mp", "uni", "external_launcher")
# envs.py:15 VLLM_HOST_IP, worker-specific (v1/executor/ray_utils.py:18); RAY_ADDRESS read by
# ray.init(address=None) (v1/executor/ray_utils.py:321)
VLLM_033_ENV = ("VLLM_HOST_IP", "VLLM_API_KEY", "RAY_ADDRESS")

LEAD_ADDRESS, FOLLOWER_ADDRESS, PORT = "10.1.0.11", "10.1.0.12", 20000


def two_host_spec() -> LaunchSpec:
    """TP 4 x PP 2 over two hosts of four GPUs: the lead's four leased GPUs, its head's GCS."""
    return LaunchSpec(
        deployment_id="7",
        model="meta-llama/Llama-3.1-70B-Instruct",
        port=8100,
        host="0.0.0.0",  # noqa: S104 - a value under test, nothing binds here
        served_model_name="llama-70b",
        api_key="sk-golden",
        tensor_parallel_size=4,
        pipeline_parallel_size=2,
        gpu_indices=(0, 1, 2, 3),
        gpu_memory_utilization=0.9,
        max_model_len=8192,
        spans_hosts=True,
        ray_address=f"{LEAD_ADDRESS}:{PORT}",
        node_address=LEAD_ADDRESS,
        owner="gpu-a@0123456789ab",
    )


def test_golden_two_host_vllm_serve() -> None:
    cmd = VllmAdapter(executable="/opt/vllm/bin/vllm").build(two_host_spec())
    assert " ".join(cmd.argv) == (
        "/opt/vllm/bin/vllm serve meta-llama/Llama-3.1-70B-Instruct "
        "--served-model-name llama-70b --host 0.0.0.0 --port 8100 "
        "--tensor-parallel-size 4 --pipeline-parallel-size 2 --gpu-memory-utilization 0.9 "
        "--max-model-len 8192 --distributed-executor-backend ray"
    )
    flags = [a for a in cmd.argv if a.startswith("--")]
    assert set(flags) <= set(VLLM_033_SERVE_FLAGS), set(flags) - set(VLLM_033_SERVE_FLAGS)
    backend = cmd.argv[cmd.argv.index("--distributed-executor-backend") + 1]
    assert backend in VLLM_033_BACKENDS
    env = cmd.env
    assert env["RAY_ADDRESS"] == "10.1.0.11:20000"
    assert env["VLLM_HOST_IP"] == LEAD_ADDRESS
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert env["VLLM_API_KEY"] == "sk-golden" and "sk-golden" not in cmd.argv
    assert {k for k in env if k.startswith(("VLLM_HOST", "RAY_ADDRESS"))} <= set(VLLM_033_ENV)


def node(head_address: str | None, address: str) -> commands.NodeSpec:
    return commands.NodeSpec(
        deployment_id="7",
        host_name="gpu-a" if head_address is None else "gpu-b",
        address=address,
        base_port=PORT,
        num_gpus=4,
        gpu_indices=(4, 5, 6, 7) if head_address else (0, 1, 2, 3),
        head_address=head_address,
        owner="gpu-a@0123456789ab",
    )


def test_golden_ray_nodes() -> None:
    head = commands.node_argv("ray", node(None, LEAD_ADDRESS))
    assert " ".join(head) == (
        "ray start --block --disable-usage-stats --head --port 20000 --include-dashboard=false "
        "--dashboard-port 20007 --node-ip-address 10.1.0.11 --num-gpus 4 "
        '--resources {"shardboard_host_gpu-a": 1} --node-manager-port 20001 '
        "--object-manager-port 20002 --dashboard-agent-listen-port 20003 "
        "--dashboard-agent-grpc-port 20004 --runtime-env-agent-port 20005 "
        "--metrics-export-port 20006 --min-worker-port 20008 --max-worker-port 20047"
    )
    worker = node(f"{LEAD_ADDRESS}:{PORT}", FOLLOWER_ADDRESS)
    argv = commands.node_argv("ray", worker)
    assert argv[argv.index("--address") + 1] == "10.1.0.11:20000" and "--head" not in argv
    env = commands.node_env(worker)
    assert env["VLLM_HOST_IP"] == FOLLOWER_ADDRESS  # each node its own (not the driver's)
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert env["SHARDBOARD_DEPLOYMENT_ID"] == "ray-node:7"
    assert env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "0"


def test_ray_start_accepts_every_flag_the_nodes_use() -> None:
    """Ray's own CLI (the installed one) lists each flag the two node lines pass."""
    ray = Path(sys.executable).parent / "ray"
    text = subprocess.run(
        [str(ray), "start", "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    used = set(commands.node_argv("ray", node(None, LEAD_ADDRESS)))
    used |= set(commands.node_argv("ray", node(f"{LEAD_ADDRESS}:{PORT}", FOLLOWER_ADDRESS)))
    flags = {a.split("=")[0] for a in used if a.startswith("--")}
    missing = {f for f in flags if f" {f} " not in text and f" {f}\n" not in text}
    assert not missing


def test_port_range_and_ray_next_to_vllm() -> None:
    assert commands.port_blocks("20000-20095") == [20000, 20048]
    for bad in ("20000", "x-y", "20000-20010", "80-2000"):
        try:
            commands.port_blocks(bad)
        except commands.PortRangeError as exc:
            assert "SHARDBOARD_RAY_PORTS" in str(exc)
        else:
            raise AssertionError(f"{bad!r} was accepted")
    assert commands.ray_executable("", "/opt/vllm-env/bin/vllm") == "/opt/vllm-env/bin/ray"
    assert commands.ray_executable("/usr/local/bin/ray", "/opt/x/vllm") == "/usr/local/bin/ray"


COMMIT = "e4c532ab2eccdf358e69fb93f6ad372a6a64d7af"


def test_golden_two_host_hub_model_is_the_repo_pinned_to_the_commit_offline() -> None:
    """A Hub model over two hosts: the lead's snapshot path exists on the lead only, and vLLM
    gives its model argument as is to every worker (ModelConfig in the VllmConfig each
    RayWorkerProc gets), which loads it with `os.path.isdir(model)` else
    `snapshot_download(model, revision=model_config.revision,
    local_files_only=HF_HUB_OFFLINE)` (model_executor/model_loader/weight_utils.py:337-347,
    default_loader.py:151-177). So: the repo id, `--revision` the commit every host
    fetched, HF_HUB_OFFLINE=1; each node's own HF_HUB_CACHE wins over the driver's, which
    vLLM only fills in with setdefault (v1/executor/ray_executor_v2.py:173-175)."""
    d = Deployment(model_id="meta-llama/Llama-3.1-70B-Instruct", revision="main")
    snapshot = Path("/srv/hf/hub/models--meta-llama--Llama-3.1-70B-Instruct/snapshots") / COMMIT
    model, revision, env = engine_spec._weights_ref(d, snapshot, spans_hosts=True)
    assert (model, revision) == ("meta-llama/Llama-3.1-70B-Instruct", COMMIT)
    assert dict(env) == {"HF_HUB_CACHE": str(fetching.cache_dir())}
    # One host: the snapshot folder itself, no revision.
    assert engine_spec._weights_ref(d, snapshot, spans_hosts=False) == (str(snapshot), None, ())
    # Nothing fetched (a local folder, or fetching off): as the launch asked.
    assert engine_spec._weights_ref(d, None, spans_hosts=True)[:2] == (d.model_id, "main")

    spec = replace(
        two_host_spec(),
        model=model,
        revision=revision,
        hf_offline=True,
        extra_env=(("HF_HUB_CACHE", "/srv/hf/hub"),),
    )
    cmd = VllmAdapter(executable="/opt/vllm/bin/vllm").build(spec)
    assert " ".join(cmd.argv) == (
        "/opt/vllm/bin/vllm serve meta-llama/Llama-3.1-70B-Instruct "
        "--served-model-name llama-70b --host 0.0.0.0 --port 8100 "
        f"--tensor-parallel-size 4 --pipeline-parallel-size 2 --revision {COMMIT} "
        "--gpu-memory-utilization 0.9 "
        "--max-model-len 8192 --distributed-executor-backend ray"
    )
    assert {a for a in cmd.argv if a.startswith("--")} <= set(VLLM_033_SERVE_FLAGS)
    assert cmd.env["HF_HUB_OFFLINE"] == "1" and cmd.env["HF_HUB_CACHE"] == "/srv/hf/hub"
    assert "HF_TOKEN" not in cmd.env  # offline: no token goes to the engine

    follower = replace(
        node(f"{LEAD_ADDRESS}:{PORT}", FOLLOWER_ADDRESS), hub_cache="/data/hf/hub", hf_offline=True
    )
    env = commands.node_env(follower)
    assert env["HF_HUB_CACHE"] == "/data/hf/hub" and env["HF_HUB_OFFLINE"] == "1"
    plain = commands.node_env(node(f"{LEAD_ADDRESS}:{PORT}", FOLLOWER_ADDRESS))
    assert "HF_HUB_CACHE" not in plain and "HF_HUB_OFFLINE" not in plain
