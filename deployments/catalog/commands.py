"""The copy-paste commands of a plan: `vllm serve`, `docker run` and a Kubernetes Deployment."""

from __future__ import annotations

import json
import shlex
from typing import Any

from deployments import planning
from deployments.catalog.sources import ModelSource
from deployments.handoff import snapshot

HF_CACHE = "/root/.cache/huggingface"


COMMAND_TITLES = (
    ("vllm", "vllm serve"),
    ("docker", "docker run"),
    ("kubernetes", "Kubernetes Deployment"),
)


def command_blocks(payload: dict[str, Any]) -> list[tuple[str, str, str]]:
    commands = (payload.get("plan") or {}).get("commands", {})
    return [(key, title, commands.get(key, "")) for key, title in COMMAND_TITLES]


def plan_argv(p: planning.Plan, source: ModelSource) -> list[str]:
    """The plan's `vllm serve` line, pinned to the source's revision: rendered by the vLLM
    adapter from the plan's snapshot, the same function a host worker spawns the engine with."""
    plan = snapshot.from_plan(p)
    return list(
        snapshot.planned_command(plan, "vllm", model=source.engine_model, revision=source.revision)
    )


def _container_model(source: ModelSource) -> str:
    return f"/models/{source.engine_model.rstrip('/').rsplit('/', 1)[-1]}"


def container_args(argv: list[str], source: ModelSource) -> list[str]:
    """What follows the image's `vllm serve` entrypoint; a local folder is mounted at /models."""
    args = argv[2:]
    if source.is_local and args:
        args[0] = _container_model(source)
    return args


def image(vllm_version: str) -> str:
    return f"vllm/vllm-openai:v{vllm_version}"


def docker_lines(
    p: planning.Plan, source: ModelSource, argv: list[str], vllm_version: str
) -> list[str]:
    """One `docker run` per replica, each on its own GPUs and port."""
    lines = []
    if p.multi_host:
        lines.append("# This plan spans hosts (Ray): start a Ray cluster on each host first.")
    for n, gpus in enumerate(p.gpus or ((),)):
        devices = ",".join(str(g.index) for g in gpus) or "all"
        cmd = ["docker", "run", "--rm", "--ipc=host", "--gpus", f'"device={devices}"']
        cmd += ["-p", f"{8000 + n}:8000"]
        rest = ["--env", "HF_TOKEN"]  # passed through from the caller's environment
        if source.is_local:
            rest = ["-v", f"{source.engine_model}:{_container_model(source)}:ro", *rest]
        rest += [image(vllm_version), *container_args(argv, source)]
        cache_mount = f'-v "$HOME/.cache/huggingface:{HF_CACHE}"'
        lines.append(f"{shlex.join(cmd)} {cache_mount} {shlex.join(rest)}")
    return lines


def k8s_manifest(
    p: planning.Plan, source: ModelSource, argv: list[str], vllm_version: str, name: str
) -> str:
    """A Deployment with one pod per replica, each limited to TP × PP GPUs."""
    q = json.dumps
    name = (name or "vllm")[:55].strip("-") or "vllm"
    lines = [
        "apiVersion: apps/v1",
        "kind: Deployment",
        "metadata:",
        f"  name: {q(name)}",
        f"  labels: {{app: {q(name)}}}",
        "spec:",
        f"  replicas: {max(p.replicas, 1)}",
        f"  selector: {{matchLabels: {{app: {q(name)}}}}}",
        "  template:",
        f"    metadata: {{labels: {{app: {q(name)}}}}}",
        "    spec:",
        "      containers:",
        "        - name: vllm",
        f"          image: {q(image(vllm_version))}",
        f"          args: {q(container_args(argv, source))}",
        "          env:",
        "            - name: HF_TOKEN",
        "              valueFrom: {secretKeyRef: {name: hf-token, key: token, optional: true}}",
        "          ports: [{containerPort: 8000}]",
        "          readinessProbe: {httpGet: {path: /health, port: 8000}, periodSeconds: 10}",
        f"          resources: {{limits: {{nvidia.com/gpu: {p.gpus_per_replica}}}}}",
        "          volumeMounts:",
        f"            - {{name: hf-cache, mountPath: {HF_CACHE}}}",
        "            - {name: shm, mountPath: /dev/shm}",
    ]
    volumes = [
        "        - {name: hf-cache, emptyDir: {}}",
        "        - {name: shm, emptyDir: {medium: Memory, sizeLimit: 8Gi}}",
    ]
    if source.is_local:
        lines.append(f"            - {{name: model, mountPath: {q(_container_model(source))}}}")
        volumes.append(f"        - {{name: model, hostPath: {{path: {q(source.engine_model)}}}}}")
    return "\n".join([*lines, "      volumes:", *volumes]) + "\n"
