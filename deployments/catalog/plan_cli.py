"""The ``plan`` command's logic, free of Django so it can be called and tested directly.

``add_arguments`` declares the options, ``run_plan`` turns parsed options into the text to
print, raising ``PlanCliError`` (one line, exit status 2) for any bad input."""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deployments import planning
from deployments.catalog import gguf_cli
from deployments.catalog.modelfiles import ModelFilesError, folder_spec
from deployments.handoff import snapshot
from deployments.planning.units import GIB


class PlanCliError(ValueError):
    """Bad input for ``plan``: printed as one line, exit status 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``manage.py plan``."""
    parser.add_argument(
        "model",
        help="local model folder (config.json) or Hub id org/name; GGUF (llama.cpp): a .gguf "
        "path, local:<root>/<file>.gguf or org/repo:QUANT",
    )
    parser.add_argument("--gpus", help="NxSIZE[@nvlink|@pcie], e.g. 4x80GiB; default: registered")
    parser.add_argument("--tp", type=int, help="tensor parallel size (pins the first plan)")
    parser.add_argument("--pp", type=int, help="pipeline parallel size (pins the first plan)")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--quantization", default=None)
    parser.add_argument("--kv-cache-dtype", dest="kv_cache_dtype", default="auto")
    parser.add_argument("--max-model-len", dest="max_model_len", type=int)
    parser.add_argument("--max-num-seqs", dest="max_num_seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", dest="max_num_batched_tokens", type=int)
    parser.add_argument("--gpu-memory-utilization", dest="gpu_memory_utilization", type=float)
    parser.add_argument("--block-size", dest="block_size", type=int)
    parser.add_argument(
        "--decode-context-parallel-size",
        dest="decode_context_parallel_size",
        type=int,
        help="split each request's KV cache over this many of the TP ranks (vLLM's DCP)",
    )
    parser.add_argument("--vllm-version", dest="vllm_version", default="0.33.0")
    parser.add_argument(
        "--concurrency",
        type=int,
        help="full-length requests one replica must hold at once; sizes the GPU share "
        "(--gpu-memory-utilization) to that load",
    )
    parser.add_argument(
        "--goal",
        choices=planning.GOALS,
        default="balanced",
        help="balanced: fewer GPUs per replica; throughput: more replicas",
    )
    parser.add_argument(
        "--replicas",
        default="max",
        help="replicas of the layout to place: a number, or max (as many as fit; the default)",
    )
    parser.add_argument(
        "--placement",
        choices=planning.PLACEMENTS,
        default="spread",
        help="spread: replicas on different hosts first (the default); packed: fill hosts in turn",
    )
    parser.add_argument(
        "--cpu",
        nargs="?",
        const="registered",
        default=None,
        metavar="CORESxRAM",
        help="plan vLLM's CPU build on a CPU: the registered hosts' CPUs, or a what-if "
        "CORESxRAM[@NUMA] (8x64GiB), or 'local' (this machine's)",
    )
    parser.add_argument(
        "--kv-cache-bytes",
        dest="kv_cache_bytes",
        type=int,
        help="with --cpu: each rank's KV space (--kv-cache-memory-bytes); default: from free RAM",
    )
    parser.add_argument(
        "--sleep-mode",
        dest="sleep_mode",
        action="store_true",
        help="the engine should sleep when idle (vLLM on the CPU refuses it)",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON contract")
    gguf_cli.add_gguf_arguments(parser)


def run_plan(options: Mapping[str, Any]) -> str:
    """Plan as the options say and return the text to print."""
    if gguf_cli.is_gguf_model(str(options["model"])):
        return _run_gguf(options)
    try:
        spec = load_model(str(options["model"]))
        cpu = options.get("cpu")
        inventory = load_cpu_inventory(str(cpu)) if cpu else load_inventory(options.get("gpus"))
        request = request_from(options)
        result = planning.plan(spec, inventory, request)
    except (planning.PlanningError, ModelFilesError) as exc:
        raise PlanCliError(one_line(str(exc))) from None
    if options.get("json"):
        out = planning.result_to_json(result)
        for entry, p in zip(out["plans"], result.plans, strict=True):
            entry["command"] = list(planned_argv(p, request))
            # what the command needs in its environment (a CPU plan's core range per rank)
            entry["environment"] = snapshot.planned_environment(snapshot.from_plan(p), "vllm")
        return json.dumps(out, indent=2)
    first = result.plans[0] if result.plans else None
    notes = planning.layer_notes(spec, tp=first.tensor_parallel_size) if first else ()
    return render(result, inventory, request, notes=notes)


def _run_gguf(options: Mapping[str, Any]) -> str:
    """A GGUF model on llama.cpp; ``--gpus`` is one machine (llama-server spans one machine's
    GPUs: ``1x24GiB@pcie,1x16GiB@pcie`` is two cards side by side)."""
    try:
        spec = gguf_cli.load_gguf(str(options["model"]))
        gpus = options.get("gpus")
        inventory = (
            planning.one_machine(planning.parse_gpus(gpus)) if gpus else load_inventory(None)
        )
        return gguf_cli.run_gguf_plan(options, spec, inventory)
    except planning.PlanningError as exc:
        raise PlanCliError(one_line(str(exc))) from None


def request_from(options: Mapping[str, Any]) -> planning.PlanRequest:
    """The PlanRequest the options describe."""
    return planning.PlanRequest(
        model=str(options["model"]),
        tensor_parallel_size=options.get("tp"),
        pipeline_parallel_size=options.get("pp"),
        dtype=options.get("dtype") or "auto",
        quantization=options.get("quantization") or None,
        kv_cache_dtype=options.get("kv_cache_dtype") or "auto",
        max_model_len=options.get("max_model_len"),
        max_num_seqs=options.get("max_num_seqs"),
        max_num_batched_tokens=options.get("max_num_batched_tokens"),
        gpu_memory_utilization=options.get("gpu_memory_utilization"),
        block_size=options.get("block_size"),
        decode_context_parallel_size=options.get("decode_context_parallel_size"),
        vllm_version=options.get("vllm_version") or planning.DEFAULT_VLLM_VERSION,
        concurrency=options.get("concurrency"),
        goal=options.get("goal") or "balanced",
        replicas=replicas_option(options.get("replicas")),
        placement=options.get("placement") or "spread",
        device="cpu" if options.get("cpu") else "gpu",
        kv_cache_bytes=options.get("kv_cache_bytes"),
        sleep_mode=bool(options.get("sleep_mode")),
    )


def replicas_option(value: object) -> int | None:
    """``--replicas``: a whole number of replicas, or ``max`` (None: as many as fit)."""
    if value is None or value == "" or str(value).strip().lower() == "max":
        return None
    text = str(value).strip()
    if not text.isdigit() or len(text) > 6:
        raise PlanCliError(f"--replicas must be a whole number or max, got {text!r}")
    return int(text)


def load_model(ref: str) -> planning.ModelSpec:
    """A local folder, else a Hub id through the project's hub client."""
    folder = Path(ref).expanduser()
    if folder.is_dir():
        return folder_spec(folder)
    if ref.count("/") != 1 or ref.startswith((".", "/", "~")):
        raise PlanCliError(f"{ref}: no such model folder")
    return _hub_model(ref)


def _hub_model(ref: str) -> planning.ModelSpec:
    try:
        from deployments.catalog.sources import ModelSourceError, load_spec, resolve_source
    except Exception as exc:  # Django not configured: only local folders work
        raise PlanCliError(
            f"{ref}: not a local folder, and the Hub is unavailable ({exc})"
        ) from None
    try:
        return load_spec(resolve_source(ref))
    except ModelSourceError as exc:
        raise PlanCliError(one_line(str(exc))) from None


def load_inventory(gpus: str | None) -> planning.Inventory:
    """``--gpus`` parsed, else every registered host (needs Django)."""
    if gpus:
        return planning.parse_gpus(gpus)
    try:
        from deployments.catalog.registered import planner_host
        from monitoring.models import Host

        hosts = tuple(planner_host(h) for h in Host.objects.in_service())
    except Exception as exc:  # no database or no foundation yet: say so in one line
        raise PlanCliError(f"no --gpus given and no registered inventory ({exc})") from None
    if not any(h.gpus for h in hosts):
        raise PlanCliError("no --gpus given and no GPUs are registered; pass e.g. --gpus 4x80GiB")
    return planning.Inventory(hosts)


def load_cpu_inventory(cpu: str) -> planning.Inventory:
    """``--cpu``: the registered hosts' CPUs, this machine's (``local``), or a what-if."""
    if cpu == "local":
        return _local_cpu()
    if cpu != "registered":
        return planning.parse_cpu(cpu)
    try:
        from deployments.catalog.registered import planner_host
        from monitoring.models import Host

        hosts = tuple(planner_host(h) for h in Host.objects.in_service())
    except Exception as exc:  # no database or no foundation yet: say so in one line
        raise PlanCliError(
            f"no registered CPU to plan on ({exc}); pass e.g. --cpu 8x64GiB"
        ) from None
    if not any(h.cpu for h in hosts):
        raise PlanCliError("no host offers its CPU; pass --cpu local, or e.g. --cpu 8x64GiB")
    return planning.Inventory(hosts)


def _local_cpu() -> planning.Inventory:
    """This machine's CPU and free RAM, read as a host worker reads them."""
    import psutil

    from monitoring.gpus.cpu import read_facts

    facts = read_facts()
    cpu = planning.Cpu(
        name=facts.name,
        cores=facts.cores,
        total_bytes=facts.total_bytes,
        free_bytes=int(psutil.virtual_memory().available),
        numa_nodes=facts.numa_nodes,
        isa=facts.isa,
        arch=facts.arch,
        core_ids=facts.core_ids,
    )
    return planning.Inventory((planning.Host("local", (), cpu=cpu),))


def one_line(text: str) -> str:
    """Collapse a message onto one line."""
    return " ".join(text.split())


def render(
    result: planning.PlanResult,
    inventory: planning.Inventory | None = None,
    request: planning.PlanRequest | None = None,
    notes: tuple[str, ...] = (),
) -> str:
    """Human output: per-GPU table and command of the first plan, what it reserves of each
    GPU (given the inventory), what sets the model's KV cache apart, then every other layout."""
    if not result.plans:
        return f"No layout to plan: {result.reason or 'the inventory has no GPUs'}."
    lines = _plan_block(result.plans[0], request or planning.PlanRequest())
    if inventory is not None:
        shares = planning.share_lines(result.plans[0], inventory, request or planning.PlanRequest())
        lines += [f"share: {line}" for line in shares]
    if result.reason:
        lines.append(f"why: {result.reason}")
    lines += [f"note: {note}" for note in notes]
    offer = result.clip_offer
    if offer is not None:
        lines.append(
            f"or: serve at most {offer.max_model_len} tokens on {offer.gpus_per_replica} GPU(s) "
            f"with TP={offer.tensor_parallel_size} PP={offer.pipeline_parallel_size} "
            f"(--max-model-len {offer.max_model_len})"
        )
    lines.append("")
    lines.append("Other layouts:")
    lines += [_plan_line(p) for p in result.plans[1:]] or ["  (none)"]
    return "\n".join(lines)


def _plan_block(p: planning.Plan, request: planning.PlanRequest) -> list[str]:
    if p.device == "cpu":
        return cpu_block(p, request)
    verdict = ("fits, TIGHT" if p.tight else "fits") if p.fits else "does NOT fit"
    asked = f" of {p.replicas_asked} asked" if p.replicas_asked else ""
    lines = [
        f"TP={p.tensor_parallel_size} PP={p.pipeline_parallel_size} replicas={p.replicas}{asked}: "
        f"{verdict}; KV cache {p.kv_cache_tokens} tokens, max concurrency "
        f"{p.max_concurrency:.2f} at {p.max_model_len} tokens",
        f"{'rank':>4} {'gpu':>10} {'weights':>9} {'activ.':>8} {'non-torch':>9} "
        f"{'graphs':>8} {'KV cache':>9} {'free':>8}  (GiB)",
    ]
    ids = [f"{g.host}:{g.index}" for g in p.gpus[0]] if p.gpus else ["-"] * len(p.per_gpu)
    for rank, (mem, gpu) in enumerate(zip(p.per_gpu, ids, strict=False)):
        lines.append(
            f"{rank:>4} {gpu:>10} {_g(mem.weights_bytes):>9} {_g(mem.activation_bytes):>8} "
            f"{_g(mem.non_torch_bytes):>9} {_g(mem.cuda_graph_bytes):>8} "
            f"{_g(mem.kv_cache_bytes):>9} {_g(mem.free_bytes):>8}"
        )
    lines += [f"reason: {r}" for r in p.reasons] + [f"warning: {w}" for w in p.warnings]
    lines += [f"tight: {r}" for r in p.tight_reasons]
    if len(p.gpus) > 1:
        lines.append("replicas on: " + replica_hosts(p.gpus))
    return [*lines, "command: " + " ".join(planned_argv(p, request))]


def cpu_block(p: planning.Plan, request: planning.PlanRequest) -> list[str]:
    """A CPU plan: one row for the host's RAM over every rank, the KV space each rank
    allocates, and the command with its environment."""
    verdict = "fits" if p.fits else "does NOT fit"
    e = p.engine_settings
    mem = p.per_gpu[0]
    where = f"{p.gpus[0][0].host}:cpu" if p.gpus and p.gpus[0] else "cpu"
    lines = [
        f"CPU TP={p.tensor_parallel_size} replicas={p.replicas}: {verdict}; KV cache "
        f"{p.kv_cache_tokens} tokens, max concurrency {p.max_concurrency:.2f} at "
        f"{p.max_model_len} tokens",
        f"{'device':>12} {'weights':>9} {'activ.':>8} {'engine':>8} {'KV cache':>9} "
        f"{'total':>8} {'RAM':>8}  (GiB)",
        f"{where:>12} {_g(mem.weights_bytes):>9} {_g(mem.activation_bytes):>8} "
        f"{_g(mem.non_torch_bytes):>8} {_g(mem.kv_cache_bytes):>9} {_g(mem.total_bytes):>8} "
        f"{_g(mem.gpu_total_bytes):>8}",
    ]
    if e.kv_cache_memory_bytes:
        lines.append(
            f"kv space: {e.kv_cache_memory_bytes} bytes on each rank; cores per rank: "
            f"{e.cpu_threads_bind}"
        )
    lines += [f"reason: {r}" for r in p.reasons] + [f"warning: {w}" for w in p.warnings]
    env = snapshot.planned_environment(snapshot.from_plan(p), "vllm")
    prefix = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    return [*lines, "command: " + " ".join([*prefix, shlex.join(planned_argv(p, request))])]


def planned_argv(p: planning.Plan, request: planning.PlanRequest) -> tuple[str, ...]:
    """The plan's ``vllm serve`` line, from the vLLM adapter's one renderer."""
    return snapshot.planned_command(
        snapshot.from_plan(p), "vllm", model=request.model or "MODEL", revision=request.revision
    )


def replica_hosts(gpus: tuple[tuple[planning.GpuRef, ...], ...], shown: int = 8) -> str:
    """``1 host-1:0,1 · 2 host-2:0,1 · … (and 6 more)``: where each replica's GPUs are."""
    parts = []
    for n, replica in enumerate(gpus[:shown], 1):
        hosts: dict[str, list[str]] = {}
        for g in replica:
            hosts.setdefault(g.host, []).append(str(g.index))
        parts.append(f"{n} " + " ".join(f"{h}:{','.join(i)}" for h, i in hosts.items()))
    more = f" (and {len(gpus) - shown} more)" if len(gpus) > shown else ""
    return " · ".join(parts) + more


def _plan_line(p: planning.Plan) -> str:
    head = f"  TP={p.tensor_parallel_size} PP={p.pipeline_parallel_size} x{p.replicas}"
    if p.device == "cpu":
        head = f"  CPU TP={p.tensor_parallel_size} x{p.replicas}"
    if p.fits and p.context_clipped:
        return f"{head}: fits only with the context clipped to {p.max_model_len} tokens"
    if p.fits:
        tight = f" (tight: {p.tight_reasons[0]})" if p.tight else ""
        return f"{head}: fits, {p.kv_cache_tokens} KV tokens, {p.max_concurrency:.2f}x{tight}"
    return f"{head}: rejected: {p.reasons[0] if p.reasons else '?'}"


def _g(n_bytes: int) -> str:
    return f"{n_bytes / GIB:.2f}"
