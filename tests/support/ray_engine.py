#!/usr/bin/env python3
"""The test engine on a real Ray cluster, standing in for `vllm serve … --distributed-executor-
backend ray` where vLLM cannot run (no GPU); started through the vLLM adapter like vLLM.

As vLLM 0.33 does (v1/executor/ray_utils.py, initialize_ray_cluster): `ray.init()` with the
address from RAY_ADDRESS, one ``{"GPU": 1}`` bundle per rank (TP × PP) in a placement group
with strategy PACK, waiting until it is placed; then it answers what `stub_engine` answers,
plus ``GET /ray/placement``: the host each bundle landed on (from the node's
``shardboard_host_<name>`` resource), and ``GET /ray/weights``: where a task in each bundle
found the model argument, resolved as vLLM's workers do (the driver's environment filled in
with setdefault under the node's own, v1/executor/ray_executor_v2.py:173-175; then offline
from the Hub cache, or a folder as given). Exits on SIGTERM, leaving the cluster.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from http.server import ThreadingHTTPServer
from typing import Any

import ray
import stub_engine
from ray.util.placement_group import placement_group, placement_group_table
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from stub_engine import Handler

HOST_RESOURCE = "shardboard_host_"


def parse(argv: list[str]) -> argparse.Namespace:
    """stub_engine's arguments, plus the parallel sizes and the executor backend."""
    args, rest = stub_engine.parse(argv)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", type=int, default=1)
    parser.add_argument("--distributed-executor-backend", default=None)
    parser.add_argument("--revision", default=None)
    return parser.parse_known_args(rest, namespace=args)[0]


def placed(pg: Any) -> dict[str, str]:
    hosts = {
        node["NodeID"]: next(
            (
                k.removeprefix(HOST_RESOURCE)
                for k in node["Resources"]
                if k.startswith(HOST_RESOURCE)
            ),
            "?",
        )
        for node in ray.nodes()
    }
    bundles = placement_group_table(pg)["bundles_to_node_id"]
    return {str(i): hosts.get(node_id, "?") for i, node_id in bundles.items()}


_RESOLVE = """
import os, sys
from huggingface_hub import snapshot_download
model, revision = sys.argv[1], sys.argv[2] or None
if os.path.isdir(model):
    print(model)
else:
    print(snapshot_download(model, revision=revision, local_files_only=True))
"""


@ray.remote(num_gpus=1, num_cpus=0)
def resolve_weights(model: str, revision: str, driver_env: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in driver_env.items():
        env.setdefault(key, value)
    run = subprocess.run(
        [sys.executable, "-c", _RESOLVE, model, revision],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = run.stdout.strip() or run.stderr.strip().splitlines()[-1]
    return {"ok": str(run.returncode == 0), "path": found, "cache": env.get("HF_HUB_CACHE", "")}


def weights_per_bundle(pg: Any, world: int, model: str, revision: str) -> dict[str, Any]:
    driver = {k: v for k, v in os.environ.items() if k.startswith("HF_")}
    refs = {
        str(i): resolve_weights.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)
        ).remote(model, revision, driver)
        for i in range(world)
    }
    return {i: ray.get(ref, timeout=120) for i, ref in refs.items()}


class RayHandler(Handler):
    placement: dict[str, str] = {}
    weights: dict[str, Any] = {}

    def do_GET(self) -> None:
        if self.path == "/ray/placement":
            self._send(200, {"bundles": self.placement})
        elif self.path == "/ray/weights":
            self._send(200, {"bundles": self.weights})
        else:
            super().do_GET()


def main(argv: list[str]) -> None:
    args = parse(argv)
    if args.distributed_executor_backend != "ray":
        sys.exit("ray_engine: needs --distributed-executor-backend ray")
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"connecting to Ray at {os.environ.get('RAY_ADDRESS')}", flush=True)
    ray.init(log_to_driver=False)
    pg = placement_group([{"GPU": 1.0}] * world, strategy="PACK")
    ray.get(pg.ready(), timeout=120)
    RayHandler.placement = placed(pg)
    RayHandler.model_name = args.served_model_name or args.model
    for bundle, host in sorted(RayHandler.placement.items()):
        print(f"bundle {bundle} placed on host {host}", flush=True)
    RayHandler.weights = weights_per_bundle(pg, world, args.model, args.revision or "")
    print(f"weights per bundle: {RayHandler.weights}", flush=True)
    server = ThreadingHTTPServer((args.host, args.port), RayHandler)
    print("Application startup complete.", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
