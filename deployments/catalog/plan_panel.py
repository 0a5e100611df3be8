"""The plan panel of a model page: where to plan (registered hosts, what-if GPUs), the plan
the planner chose and why, its chart, commands and the fields Launch posts."""

from __future__ import annotations

import shlex
import time
from typing import Any

from django.utils.text import slugify

from deployments import planning
from deployments.catalog.commands import docker_lines, k8s_manifest, plan_argv
from deployments.catalog.cpu_plan import CPU_NO_IMAGE, CPU_PARTS, command_line, cpu_details
from deployments.catalog.plan_targets import PlanTarget
from deployments.catalog.selectors import concurrency_text
from deployments.catalog.sources import ModelSource
from deployments.engines import platforms
from deployments.planning.memory.weights import pp_layer_ranges
from deployments.planning.units import GIB

PARTS = (
    ("weights_bytes", "Weights"),
    ("activation_bytes", "Activations"),
    ("non_torch_bytes", "Non-torch"),
    ("cuda_graph_bytes", "CUDA graphs"),
    ("kv_cache_bytes", "KV cache"),
)
# -- the plan panel ---------------------------------------------------------------------------


def plan_panel(
    source: ModelSource, spec: planning.ModelSpec, target: PlanTarget, req: planning.PlanRequest
) -> tuple[dict[str, Any], bool]:
    """The plan panel's JSON and whether some plan fits."""
    started = time.perf_counter()
    req.validate()
    inventory = target.inventory(req.device)
    result = planning.plan(spec, inventory, req)
    chosen = chosen_plan(result, req)
    ok = chosen is not None and chosen.fits
    payload: dict[str, Any] = {
        "ok": ok,
        "target": {
            "label": target.label,
            "simulated": target.simulated,
            "host": bool(target.hosts),
            "hosts": [h.name for h in target.hosts],
            "online": target.online,
        },
        "model_ref": source.ref,
        "revision": source.revision,
        "alternatives": [_alternative(p, p is chosen) for p in result.plans],
        "plan": None,
        "error": None,
        "reason": result.reason if chosen is result.plans[0] else "",
        "clip_offer": clip_offer(result),
        "notice": target_notice(target),
    }
    if chosen is None:
        what = "offers no CPU" if req.device == "cpu" else "has no free GPU"
        payload["error"] = result.reason or f"{target.label} {what} to plan on."
    else:
        payload["plan"] = _plan_view(chosen, source, target, req)
        payload["plan"]["format_notes"] = list(planning.format_notes(spec))
        payload["plan"]["stage_rows"] = stage_rows(chosen, spec.num_layers)
        payload["plan"]["shares"] = list(planning.share_lines(chosen, inventory, req))
        payload["plan"]["layer_notes"] = list(
            planning.layer_notes(spec, tp=chosen.tensor_parallel_size)
        )
        payload["plan"].update(model_kind(spec))
        if spec.encoder_only:  # vLLM keeps no KV cache for it: no KV rows to show
            chart = payload["plan"]["chart"]
            chart["parts"] = [part for part in chart["parts"] if part["name"] != "KV cache"]
        if not ok:
            payload["error"] = no_fit_message(chosen, spec, req)
    payload["server_ms"] = round((time.perf_counter() - started) * 1000, 2)
    return payload, ok


def model_kind(spec: planning.ModelSpec) -> dict[str, Any]:
    """What kind of model the plan serves, in words, and whether it has a KV cache at all."""
    pooling = spec.pooling
    if pooling is None:
        return {"model_kind": "", "no_kv": False}
    how = (
        "an encoder: no KV cache"
        if pooling.encoder_only
        else "a decoder: its KV cache as vLLM sizes it"
    )
    return {
        "model_kind": f"{pooling.label} ({how}; vLLM --runner pooling)",
        "no_kv": pooling.encoder_only,
    }


def clip_offer(result: planning.PlanResult) -> dict[str, Any] | None:
    """The explicit choice of a shorter context on fewer GPUs, for the panel's button."""
    p = result.clip_offer
    if p is None:
        return None
    gpus = p.gpus_per_replica
    return {
        "max_model_len": p.max_model_len,
        "tensor_parallel_size": p.tensor_parallel_size,
        "pipeline_parallel_size": p.pipeline_parallel_size,
        "text": (
            f"Or serve at most {p.max_model_len:,} tokens on {gpus} GPU{'s' if gpus != 1 else ''} "
            f"({p.label})."
        ),
    }


def target_notice(target: PlanTarget) -> str:
    offline = target.offline
    if not offline:
        return ""
    if len(offline) == 1:
        return (
            f"{offline[0]} is offline: the plan uses the GPUs it last reported. Start its host "
            "worker to launch on it."
        )
    return (
        f"{', '.join(offline)} are offline: the plan uses the GPUs they last reported. Start "
        "their host workers to launch on them."
    )


def chosen_plan(result: planning.PlanResult, req: planning.PlanRequest) -> planning.Plan | None:
    """A forced TP/PP layout is the user's choice, fitting or not; else the best that fits."""
    forced = req.tensor_parallel_size is not None or req.pipeline_parallel_size is not None
    if forced and result.plans:
        return result.plans[0]
    return result.best or next(iter(result.plans), None)


def no_fit_message(p: planning.Plan, spec: planning.ModelSpec, req: planning.PlanRequest) -> str:
    """The planner's reason, and what would fit when the context length is the problem."""
    message = p.reasons[0] if p.reasons else "No layout fits."
    wanted = req.max_model_len
    if wanted and wanted > spec.derived_max_model_len:
        return f"{message} This model allows at most {spec.derived_max_model_len} tokens."
    fits = p.longest_fitting_len or p.kv_cache_tokens
    if wanted and 0 < fits < wanted:
        return f"{message} What fits here: a context of at most {fits} tokens."
    return message


def _alternative(p: planning.Plan, chosen: bool) -> dict[str, Any]:
    return {
        "tensor_parallel_size": p.tensor_parallel_size,
        "pipeline_parallel_size": p.pipeline_parallel_size,
        "replicas": p.replicas,
        "fits": p.fits,
        "chosen": chosen,
        "reasons": list(p.reasons),
        "warnings": list(p.warnings),
        "kv_cache_tokens": p.kv_cache_tokens,
        "max_concurrency": p.max_concurrency,
        "kv_cache_tokens_text": f"{p.kv_cache_tokens:,}",
        "max_concurrency_text": concurrency_text(p.max_concurrency),
        "context_clipped": p.context_clipped,
        "max_model_len": p.max_model_len,
        "replicas_asked": p.replicas_asked,
        "tight": p.tight,
        "tight_reasons": list(p.tight_reasons),
    }


def _plan_view(
    p: planning.Plan,
    source: ModelSource,
    target: PlanTarget,
    req: planning.PlanRequest,
) -> dict[str, Any]:
    details = planning.plan_details(p)
    argv = plan_argv(p, source)
    details["gpu_labels"] = _gpu_labels(p)
    parts = CPU_PARTS if p.device == "cpu" else PARTS
    details["chart"] = chart_data(details["per_gpu"], details["gpu_labels"], parts)
    if p.device == "cpu":  # vLLM's CPU build runs from the host's own install, not vLLM's image
        details["commands"] = {
            "vllm": command_line(p, argv),
            "docker": CPU_NO_IMAGE,
            "kubernetes": CPU_NO_IMAGE,
        }
    else:
        details["commands"] = {
            "vllm": shlex.join(argv),
            "docker": "\n".join(docker_lines(p, source, argv, req.vllm_version)),
            "kubernetes": k8s_manifest(p, source, argv, req.vllm_version, default_name(source)),
        }
    details["cpu"] = cpu_details(p)
    details["launch"] = launch_fields(p, source, target, req)
    hosts = launch_hosts(p, target, req)
    # the other hosts a spanning launch names; its lead is ``launch["host"]``
    details["launch_hosts"] = hosts[1:] if p.multi_host else []
    # a Hub model over several hosts: every host needs its own copy before the launch
    details["prefetch_hosts"] = hosts if p.multi_host and not source.is_local else []
    details["launch_block"] = launch_block(p, hosts, req) or _ray_on_cpu(p, target, hosts)
    details["kv_cache_tokens_text"] = f"{p.kv_cache_tokens:,}"
    details["max_concurrency_text"] = concurrency_text(p.max_concurrency)
    details["launch_note"] = span_note(hosts) if p.multi_host else launch_note(p)
    details["replicas_text"] = replicas_text(p)
    details["replica_rows"] = replica_rows(p)
    details["tight_text"] = tight_text(p)
    return details


def replicas_text(p: planning.Plan) -> str:
    """``room for 8 replicas``, or ``3 of 4 replicas placed`` when a number was asked for."""
    if p.replicas_asked:
        return f"{p.replicas} of {p.replicas_asked} replica{_s(p.replicas_asked)} placed"
    return f"room for {p.replicas} replica{_s(p.replicas)}"


def replica_rows(p: planning.Plan, shown: int = 16) -> list[str]:
    """Where each replica runs, ``replica 2: host-2 GPUs 0, 1``; the first ``shown`` of them.
    A CPU plan says what its engine takes of the CPU."""
    if p.device == "cpu" and p.fits:
        cpu = cpu_details(p) or {}
        return [f"{cpu['threads_bind']} (cores per rank); KV space {cpu['kv_cache_text']}"]
    if len(p.gpus) < 2 and not p.replicas_asked:
        return []
    rows = []
    for n, replica in enumerate(p.gpus[:shown], 1):
        hosts: dict[str, list[str]] = {}
        for g in replica:
            hosts.setdefault(g.host, []).append(str(g.index))
        where = "; ".join(
            f"{h} CPU" if p.device == "cpu" else f"{h} GPU{_s(len(i))} {', '.join(i)}"
            for h, i in hosts.items()
        )
        rows.append(f"replica {n}: {where}")
    if len(p.gpus) > shown:
        rows.append(f"… and {len(p.gpus) - shown} more")
    return rows


def tight_text(p: planning.Plan) -> str:
    """The banner over a plan that fits only within the planner's margin."""
    if not p.tight:
        return ""
    return (
        "Tight fit: vLLM should start, but the prediction is within its error margin of a "
        "limit, so it may not: " + "; ".join(p.tight_reasons) + "."
    )


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def default_name(source: ModelSource) -> str:
    tail = source.ref.rstrip("/").rsplit("/", 1)[-1]
    return (slugify(tail.replace(".", "-").replace("_", "-")) or "model")[:63].strip("-")


def _gpu_labels(p: planning.Plan) -> list[str]:
    first = p.gpus[0] if p.gpus else ()
    if p.device == "cpu":
        ranks = p.tensor_parallel_size
        return [f"CPU · {g.host} · {ranks} rank{_s(ranks)}" for g in first] or ["CPU"]
    labels = [f"rank {i} · {g.host}:{g.index}" for i, g in enumerate(first)]
    return labels or [f"rank {i}" for i in range(len(p.per_gpu))]


def chart_data(
    per_gpu: list[dict[str, int]], labels: list[str], parts: tuple[tuple[str, str], ...] = PARTS
) -> dict[str, Any]:
    """GiB per part and device, for the stacked bars; capacity and budget as markers."""
    gib = [[round(g[key] / GIB, 3) for g in per_gpu] for key, _ in parts]
    return {
        "labels": labels,
        "parts": [
            {"name": name, "gib": values} for (_, name), values in zip(parts, gib, strict=True)
        ],
        "capacity_gib": [round(g["gpu_total_bytes"] / GIB, 3) for g in per_gpu],
        "budget_gib": [round(g["budget_bytes"] / GIB, 3) for g in per_gpu],
    }


def launch_note(p: planning.Plan) -> str:
    """How many engines Launch starts: the replicas asked for, else one (room for more or not)."""
    if p.device == "cpu":
        ranks = p.tensor_parallel_size
        cores = p.engine_settings.cpu_threads_bind or ""
        return (
            f"Launch starts the engine on the host's CPU: {ranks} rank{_s(ranks)} (cores {cores})."
        )
    gpus = p.gpus_per_replica
    where = f"{gpus} GPU{'s' if gpus != 1 else ''}"
    if p.replicas_asked > 1:
        return f"Launch starts {p.replicas_asked} replicas, each its own engine on {where}."
    if p.replicas <= 1:
        return f"Launch starts the engine on {where}."
    return (
        f"Launch starts one replica on {where}; ask for a number of replicas to launch "
        "several as one deployment."
    )


def launch_fields(
    p: planning.Plan, source: ModelSource, target: PlanTarget, req: planning.PlanRequest
) -> dict[str, str]:
    """The fields POSTed to deployment_new: the chosen layout made explicit."""

    def text(value: object) -> str:
        return "" if value is None else str(value)

    return {
        "model_ref": source.ref,
        "revision": source.revision,
        "host": next(iter(launch_hosts(p, target, req)), ""),
        "engine": "vllm",
        "tensor_parallel_size": str(p.tensor_parallel_size),
        "pipeline_parallel_size": str(p.pipeline_parallel_size),
        # A clipped context must be asked for explicitly, or vLLM refuses to start.
        "max_model_len": text(p.max_model_len if p.context_clipped else req.max_model_len),
        "max_num_seqs": text(req.max_num_seqs),
        "dtype": req.dtype,
        "quantization": text(req.quantization),
        "kv_cache_dtype": req.kv_cache_dtype,
        "gpu_memory_utilization": text(req.gpu_memory_utilization),
        # the stated load: the launch sizes its share of each GPU again, on what is free then
        "concurrency": text(req.concurrency),
        # as many as fit is what the panel shows by default; a launch takes them only if asked
        "replicas": text(req.replicas or 1),
        "placement": req.placement,
        "learned_correction": "on" if req.learned_correction else "off",
        # the device planned on, and a CPU plan's KV space per rank (--kv-cache-memory-bytes)
        "device": p.device,
        "kv_cache_bytes": text(p.engine_settings.kv_cache_memory_bytes),
    }


def launch_hosts(p: planning.Plan, target: PlanTarget, req: planning.PlanRequest) -> list[str]:
    """The hosts the replicas Launch starts run on, the engine's (first stage's) host first;
    none for a what-if inventory."""
    if not target.hosts:
        return []
    launched = p.gpus[: req.replicas or 1]
    names = list(dict.fromkeys(ref.host for replica in launched for ref in replica))
    return names or [target.hosts[0].name]


def launch_block(p: planning.Plan, hosts: list[str], req: planning.PlanRequest) -> str:
    """Why this plan cannot be launched as one deployment, or nothing."""
    if len(hosts) < 2:
        return ""
    if not p.multi_host:
        return (
            f"These replicas are placed on {len(hosts)} hosts ({', '.join(hosts)}), and one "
            "launch runs its replicas on one host: pick one host, or ask for fewer replicas."
        )
    if (req.replicas or 1) != 1:
        return "A launch over several hosts runs one replica: ask for 1."
    return ""


def _ray_on_cpu(p: planning.Plan, target: PlanTarget, hosts: list[str]) -> str:
    """A plan over several hosts whose vLLM would run on the CPU: refused at launch, so said
    here in place of a Launch that could only fail."""
    if not p.multi_host:
        return ""
    simulated = any(h.simulated for h in target.hosts if h.name in hosts)
    return platforms.ray_refusal(hosts=len(hosts), device=p.device, any_simulated=simulated) or ""


def span_note(hosts: list[str]) -> str:
    others = ", ".join(hosts[1:])
    return (
        f"Launch starts one engine over {len(hosts)} hosts with vLLM on a Ray cluster of its "
        f"own: the Ray head and the engine on {hosts[0]}, {others} joining it."
    )


def stage_rows(p: planning.Plan, num_layers: int) -> list[str]:
    """Which host runs which pipeline stage and its layers (as vLLM splits them), when the
    stages span hosts."""
    if not p.multi_host or not p.gpus:
        return []
    tp, first = p.tensor_parallel_size, p.gpus[0]
    lead = first[0].host
    layers = pp_layer_ranges(num_layers, p.pipeline_parallel_size)
    rows = []
    for stage, span in enumerate(layers):
        refs = first[stage * tp : (stage + 1) * tp]
        host = refs[0].host  # a tensor-parallel group never leaves its host
        role = "Ray head, runs the engine" if host == lead else "Ray worker"
        indices = ", ".join(str(r.index) for r in refs)
        rows.append(
            f"stage {stage + 1}: {host} GPU{_s(len(refs))} {indices}, layers {span.start}–"
            f"{span.stop - 1} ({role})"
        )
    return rows
