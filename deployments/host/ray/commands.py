"""`ray start` for one node of a deployment's own Ray cluster: its argv, environment and
ports. No Django: the host worker passes the settings in.

Every node runs in the foreground (`--block`), so it is one process group the supervisor
spawns, watches and stops like an engine, carrying a marker of its own (``ray-node:<pk>``)
that reconcile tells apart from the engine's. Each node takes a block of ports from the
configured range (its GCS, node and object managers, agents, metrics, workers), so that two
nodes on one machine never collide and a firewall between hosts opens one known range.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from deployments.engines.base import MARKER_ENV, OWNER_ENV

NODE_MARKER_PREFIX = "ray-node:"
PORT_BLOCK = 48  # 8 service ports, then 40 for Ray's worker processes
SERVICE_PORTS = 8
# Ray's own default on SIGTERM is to drain for 30 s; the engine is already gone by then.
_NODE_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    "PYTHONUNBUFFERED": "1",
    "NO_COLOR": "1",
}


class PortRangeError(ValueError):
    """SHARDBOARD_RAY_PORTS is not a usable range; the message says how to write it."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    deployment_id: str
    host_name: str
    address: str  # this node's IP, as the other hosts reach it
    base_port: int  # first port of its block
    num_gpus: int
    gpu_indices: tuple[int, ...]
    head_address: str | None  # ``ip:port`` of the head's GCS; None: this node is the head
    owner: str  # the host worker's owner marker
    hub_cache: str = ""  # this host's Hub cache (HF_HUB_CACHE)
    hf_offline: bool = False  # the weights were fetched here: no Hub access from the workers

    @property
    def marker(self) -> str:
        return node_marker(self.deployment_id)


def node_marker(deployment_id: int | str) -> str:
    return f"{NODE_MARKER_PREFIX}{deployment_id}"


def deployment_of(marker: str) -> str | None:
    """The deployment id in a ray node marker; None for an engine's marker."""
    return (
        marker.removeprefix(NODE_MARKER_PREFIX) if marker.startswith(NODE_MARKER_PREFIX) else None
    )


def parse_port_range(text: str) -> tuple[int, int]:
    first, sep, last = text.strip().partition("-")
    try:
        low, high = int(first), int(last)
    except ValueError:
        raise PortRangeError(
            f"SHARDBOARD_RAY_PORTS={text!r} is not a range; write it as FIRST-LAST, "
            "e.g. 20000-20999"
        ) from None
    if not sep or not 1024 <= low < high <= 65535 or high - low + 1 < PORT_BLOCK:
        raise PortRangeError(
            f"SHARDBOARD_RAY_PORTS={text!r} must be FIRST-LAST within 1024-65535 and hold at "
            f"least one node's {PORT_BLOCK} ports"
        )
    return low, high


def port_blocks(text: str) -> list[int]:
    """First port of every node block the range holds."""
    low, high = parse_port_range(text)
    return list(range(low, high - PORT_BLOCK + 2, PORT_BLOCK))


def ray_executable(ray_bin: str, vllm_bin: str) -> str:
    """The configured `ray`, else the one beside vLLM's executable (the Ray version vLLM
    imports must be the cluster's), else `ray` on PATH."""
    if ray_bin:
        return ray_bin
    vllm = shutil.which(vllm_bin) or vllm_bin
    beside = Path(vllm).parent / "ray"
    return str(beside) if Path(vllm).parent != Path() else "ray"


def node_argv(ray: str, spec: NodeSpec) -> tuple[str, ...]:
    """`ray start` in the foreground with every port fixed inside the node's block."""
    p = spec.base_port
    argv = [ray, "start", "--block", "--disable-usage-stats"]
    if spec.head_address is None:
        argv += ["--head", "--port", str(p), "--include-dashboard=false"]
        argv += ["--dashboard-port", str(p + 7)]
    else:
        argv += ["--address", spec.head_address]
    argv += ["--node-ip-address", spec.address, "--num-gpus", str(spec.num_gpus)]
    argv += ["--resources", json.dumps({f"shardboard_host_{spec.host_name}": 1})]
    argv += ["--node-manager-port", str(p + 1), "--object-manager-port", str(p + 2)]
    argv += ["--dashboard-agent-listen-port", str(p + 3)]
    argv += ["--dashboard-agent-grpc-port", str(p + 4)]
    argv += ["--runtime-env-agent-port", str(p + 5), "--metrics-export-port", str(p + 6)]
    argv += ["--min-worker-port", str(p + SERVICE_PORTS)]
    argv += ["--max-worker-port", str(p + PORT_BLOCK - 1)]
    return tuple(argv)


def node_env(spec: NodeSpec) -> dict[str, str]:
    """The node's environment, inherited by the vLLM workers Ray starts on it: VLLM_HOST_IP
    is per node (vLLM does not copy it from the driver: v1/executor/ray_utils.py:18), and
    CUDA_VISIBLE_DEVICES limits Ray to the GPUs this host leased."""
    env = {
        **_NODE_ENV,
        MARKER_ENV: spec.marker,
        **({OWNER_ENV: spec.owner} if spec.owner else {}),
        "VLLM_HOST_IP": spec.address,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in spec.gpu_indices),
    }
    # vLLM's Ray workers take the driver's HF_* only where the node has none (setdefault,
    # v1/executor/ray_executor_v2.py:173-175 RayWorkerProc.initialize_worker): set here, each
    # node resolves the model from its own cache, not from the lead's paths.
    if spec.hub_cache:
        env["HF_HUB_CACHE"] = spec.hub_cache
    if spec.hf_offline:
        env["HF_HUB_OFFLINE"] = "1"
    return env
