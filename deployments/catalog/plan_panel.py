"""The plan panel of a model page: where to plan (registered hosts, what-if GPUs), the plan
the planner chose and why, its chart, commands and the fields Launch posts."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from typing import Any

from django.utils import timezone
from django.utils.text import slugify

from deployments import planning
from deployments.catalog import registered
from deployments.catalog.commands import docker_lines, k8s_manifest, serve_argv
from deployments.catalog.selectors import concurrency_text
from deployments.catalog.sources import ModelSource, ModelSourceError
from deployments.models import GpuLease
from deployments.planning.units import GIB
from monitoring.models import Host

DEFAULT_WHATIF = "4x80GiB@nvlink"
WHATIF = "whatif"
PARTS = (
    ("weights_bytes", "Weights"),
    ("activation_bytes", "Activations"),
    ("non_torch_bytes", "Non-torch"),
    ("cuda_graph_bytes", "CUDA graphs"),
    ("kv_cache_bytes", "KV cache"),
)


@dataclass(frozen=True, slots=True)
class HostChoice:
    """A registered host as a plan target: whether it answers and how many GPUs are free."""

    host: Host
    online: bool
    gpus: int
    free_gpus: int

    @property
    def label(self) -> str:
        # "free": no reservation at all; a partly reserved GPU still takes right-sized shares
        state = f"{self.free_gpus} of {self.gpus} GPUs free" if self.online else "offline"
        sim = ", simulated" if self.host.simulated else ""
        return f"{self.host.name} ({state}{sim})"


def host_choices() -> list[HostChoice]:
    """Hosts in service: online ones first, the most free GPUs first."""
    now = timezone.now()
    hosts = list(Host.objects.in_service().prefetch_related("gpus"))
    reserved = set(
        GpuLease.objects.filter(active=True, gpu__host__in=hosts).values_list("gpu_id", flat=True)
    )
    choices = []
    for host in hosts:
        present = [g for g in host.gpus.all() if g.present]
        free = sum(1 for g in present if g.pk not in reserved)
        choices.append(HostChoice(host, host.is_online(now), len(present), free))
    return sorted(choices, key=lambda c: (not c.online, -c.free_gpus, c.host.name))


def default_target(choices: list[HostChoice]) -> PlanTarget:
    """The online host with the most free GPUs; a what-if inventory when none is online."""
    first = next((c for c in choices if c.online), None)
    return PlanTarget(first.host, "") if first else PlanTarget(None, DEFAULT_WHATIF)


# -- the plan panel ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlanTarget:
    """Where to plan: a registered host, or a what-if GPU spec."""

    host: Host | None
    gpus_spec: str

    @property
    def label(self) -> str:
        return self.host.name if self.host else f"what-if {self.gpus_spec}"

    @property
    def simulated(self) -> bool:
        return bool(self.host and self.host.simulated)

    @property
    def online(self) -> bool:
        """What-if inventories are always plannable; a host only while its worker answers."""
        return self.host is None or self.host.is_online()

    def inventory(self) -> planning.Inventory:
        if self.host is not None:
            return registered.host_inventory(self.host)
        return planning.parse_gpus(self.gpus_spec, host="what-if")


def plan_target(target: str, gpus_spec: str) -> PlanTarget:
    if not target or target == WHATIF:
        return PlanTarget(None, gpus_spec.strip() or DEFAULT_WHATIF)
    host = Host.objects.in_service().filter(name=target).first()
    if host is None:
        raise ModelSourceError(f"There is no registered host {target!r}: pick one from the list.")
    return PlanTarget(host, "")


def plan_panel(
    source: ModelSource, spec: planning.ModelSpec, target: PlanTarget, req: planning.PlanRequest
) -> tuple[dict[str, Any], bool]:
    """The plan panel's JSON and whether some plan fits."""
    started = time.perf_counter()
    req.validate()
    inventory = target.inventory()
    result = planning.plan(spec, inventory, req)
    chosen = chosen_plan(result, req)
    ok = chosen is not None and chosen.fits
    payload: dict[str, Any] = {
        "ok": ok,
        "target": {
            "label": target.label,
            "simulated": target.simulated,
            "host": target.host is not None,
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
        payload["error"] = f"{target.label} has no free GPU to plan on."
    else:
        payload["plan"] = _plan_view(chosen, source, target, req)
        payload["plan"]["format_notes"] = list(planning.format_notes(spec))
        payload["plan"]["shares"] = list(planning.share_lines(chosen, inventory, req))
        payload["plan"]["layer_notes"] = list(
            planning.layer_notes(spec, tp=chosen.tensor_parallel_size)
        )
        if not ok:
            payload["error"] = no_fit_message(chosen, spec, req)
    payload["server_ms"] = round((time.perf_counter() - started) * 1000, 2)
    return payload, ok


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
    if target.online:
        return ""
    return (
        f"{target.host.name if target.host else 'This host'} is offline: the plan uses the GPUs "
        "it last reported. Start its host worker to launch on it."
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
    argv = serve_argv(p, source)
    details["gpu_labels"] = _gpu_labels(p)
    details["chart"] = chart_data(details["per_gpu"], details["gpu_labels"])
    details["commands"] = {
        "vllm": shlex.join(argv),
        "docker": "\n".join(docker_lines(p, source, argv, req.vllm_version)),
        "kubernetes": k8s_manifest(p, source, argv, req.vllm_version, default_name(source)),
    }
    details["launch"] = launch_fields(p, source, target, req)
    details["kv_cache_tokens_text"] = f"{p.kv_cache_tokens:,}"
    details["max_concurrency_text"] = concurrency_text(p.max_concurrency)
    details["launch_note"] = launch_note(p)
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
    """Where each replica runs, ``replica 2: host-2 GPUs 0, 1``; the first ``shown`` of them."""
    if len(p.gpus) < 2 and not p.replicas_asked:
        return []
    rows = []
    for n, replica in enumerate(p.gpus[:shown], 1):
        hosts: dict[str, list[str]] = {}
        for g in replica:
            hosts.setdefault(g.host, []).append(str(g.index))
        where = "; ".join(f"{h} GPU{_s(len(i))} {', '.join(i)}" for h, i in hosts.items())
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
    labels = [f"rank {i} · {g.host}:{g.index}" for i, g in enumerate(first)]
    return labels or [f"rank {i}" for i in range(len(p.per_gpu))]


def chart_data(per_gpu: list[dict[str, int]], labels: list[str]) -> dict[str, Any]:
    """GiB per part and GPU, for the stacked bars; capacity and budget as markers."""
    gib = [[round(g[key] / GIB, 3) for g in per_gpu] for key, _ in PARTS]
    return {
        "labels": labels,
        "parts": [
            {"name": name, "gib": values} for (_, name), values in zip(PARTS, gib, strict=True)
        ],
        "capacity_gib": [round(g["gpu_total_bytes"] / GIB, 3) for g in per_gpu],
        "budget_gib": [round(g["budget_bytes"] / GIB, 3) for g in per_gpu],
    }


def launch_note(p: planning.Plan) -> str:
    """How many engines Launch starts: the replicas asked for, else one (room for more or not)."""
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
        "host": target.host.name if target.host else "",
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
    }
