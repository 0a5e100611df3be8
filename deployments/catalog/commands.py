"""The copy-paste commands of a plan: `vllm serve`, `docker run` and a Kubernetes Deployment;
for a GGUF plan, `llama-server` and its `docker run`."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from deployments import planning
from deployments.catalog.sources import ModelSource
from deployments.handoff import snapshot

HF_CACHE = "/root/.cache/huggingface"
# llama.cpp's own server images (its docs/docker.md); the entrypoint is llama-server.
LLAMA_IMAGE_GPU = "ghcr.io/ggml-org/llama.cpp:server-cuda"
LLAMA_IMAGE_CPU = "ghcr.io/ggml-org/llama.cpp:server"
LLAMA_PORT = 8080  # llama-server's default


COMMAND_TITLES = (
    ("vllm", "vllm serve"),
    ("docker", "docker run"),
    ("kubernetes", "Kubernetes Deployment"),
)


LLAMA_COMMAND_TITLES = (
    ("llamacpp", "llama-server"),
    ("docker", "docker run"),
)


def command_blocks(payload: dict[str, Any]) -> list[tuple[str, str, str]]:
    commands = (payload.get("plan") or {}).get("commands", {})
    titles = LLAMA_COMMAND_TITLES if "llamacpp" in commands else COMMAND_TITLES
    return [(key, title, commands.get(key, "")) for key, title in titles]


def plan_argv(p: planning.Plan, source: ModelSource) -> list[str]:
    """The plan's `vllm serve` line, pinned to the source's revision: rendered by the vLLM
    adapter from the plan's snapshot, the same function a host worker spawns the engine with."""
    plan = snapshot.from_plan(p)
    return list(
        snapshot.planned_command(plan, "vllm", model=source.engine_model, revision=source.revision)
    )


def planned_env(p: planning.Plan) -> dict[str, str]:
    """The environment the plan's `vllm serve` line needs (a CPU plan's core range per rank)."""
    return snapshot.planned_environment(snapshot.from_plan(p), "vllm")


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


def llama_argv(plan: snapshot.PlanSnapshot, gguf_path: str) -> list[str]:
    """The plan's `llama-server` line: the adapter's own renderer, as the host spawns it."""
    return list(snapshot.planned_command(plan, "llamacpp", model=gguf_path))


def llama_docker_line(argv: Sequence[str], gguf_path: str, gpus: Sequence[int]) -> str:
    """`docker run` of llama.cpp's server image on the plan's GPUs (none: the CPU image), the
    GGUF's folder mounted read-only; inside a container it must listen on every address."""
    folder, _, name = gguf_path.rpartition("/")
    args = [f"/models/{name}" if a == gguf_path else a for a in argv[1:]]
    cmd = ["docker", "run", "--rm"]
    if gpus:
        cmd += ["--gpus", f'"device={",".join(str(i) for i in gpus)}"']
    cmd += ["-p", f"{LLAMA_PORT}:{LLAMA_PORT}", "-v", f"{folder or '.'}:/models:ro"]
    cmd += ["--env", "LLAMA_API_KEY"]  # passed through from the caller's environment
    cmd.append(LLAMA_IMAGE_GPU if gpus else LLAMA_IMAGE_CPU)
    listen = ["--host", "0.0.0.0", "--port", str(LLAMA_PORT)]  # noqa: S104 - in the container
    return shlex.join([*cmd, *args, *listen])
