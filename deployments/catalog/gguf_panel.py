"""The plan panel of a GGUF model: the llama.cpp plan on a registered host or what-if GPUs,
with the same per-device breakdown as a vLLM plan, the split it chose and what it costs."""

from __future__ import annotations

import shlex
import time
from typing import Any

from django.utils.text import slugify

from deployments import planning
from deployments.catalog import commands
from deployments.catalog.gguf_plan import (
    PARTS,
    GgufOptions,
    plan_json,
    ratios_text,
    share_text,
    size_text,
    split_text,
)
from deployments.catalog.gguf_sources import GgufSource
from deployments.catalog.plan_panel import target_notice
from deployments.catalog.plan_targets import PlanTarget
from deployments.handoff.llamacpp_snapshot import from_llamacpp_plan
from deployments.planning.units import GIB

# What-if GPUs by default: one consumer card; the panel offers others, among them two unequal
# cards over PCIe (the case llama.cpp's -ts ratios are for).
GGUF_WHATIF = "1x24GiB@pcie"
GGUF_WHATIFS = (GGUF_WHATIF, "1x24GiB@pcie,1x16GiB@pcie", "2x24GiB@pcie", "4x16GiB@pcie")
PICK_HOST = "Pick a registered host to launch."


def gguf_inventory(target: PlanTarget) -> planning.Inventory:
    """Registered hosts as they are; a what-if spec as one machine, since one llama-server
    spans only the GPUs of its own machine (``one_machine``)."""
    if target.hosts:
        return target.inventory()
    return planning.one_machine(target.inventory(), name="what-if")


def device_rows(plan: dict[str, Any]) -> list[dict[str, str]]:
    """The per-device table: GiB with two decimals, the CPU's share last."""

    def g(n: int | None) -> str:
        return "—" if n is None else size_text(n)

    rows = []
    for d in [*plan["devices"], plan["cpu"]]:
        rows.append(
            {
                "device": d["device"] + (f" · {d['gpu_name']}" if d["gpu_name"] else ""),
                "layers": d["layer_span"],
                "weights": g(d["weights_bytes"]),
                "kv": g(d["kv_bytes"]),
                "compute": g(d["compute_bytes"]),
                "other": g(d["overhead_bytes"] + d["output_buffer_bytes"]),
                "free": g(d.get("left_bytes")),
            }
        )
    return rows


def chart(plan: dict[str, Any]) -> dict[str, Any]:
    """GiB per part and GPU for the stacked bars, capacity as a marker (the shape of vLLM's)."""
    devices = plan["devices"]
    return {
        "labels": [
            f"{d['device']} · {d['layers']} block{'' if d['layers'] == 1 else 's'}" for d in devices
        ],
        "parts": [
            {"name": name, "gib": [round(d[key] / GIB, 3) for d in devices]} for key, name in PARTS
        ],
        "capacity_gib": [round(d["free_bytes"] / GIB, 3) for d in devices],
        "budget_gib": [round((d["free_bytes"] - d["margin_bytes"]) / GIB, 3) for d in devices],
    }


def _alternative(p: planning.LlamaCppPlan, chosen: bool) -> dict[str, Any]:
    return {
        "host": p.host,
        "gpus": [g.index for g in p.gpus],
        "tensor_split": list(p.tensor_split),
        "tensor_split_text": ",".join(share_text(s) for s in p.tensor_split),
        "gpu_layers": p.gpu_layers,
        "fits": p.fits,
        "chosen": chosen,
        "reasons": list(p.reasons),
        "note": p.note,
    }


def no_fit_message(p: planning.LlamaCppPlan, options: GgufOptions) -> str:
    message = "; ".join(p.reasons) or "No placement fits."
    if options.allow_partial_offload:
        return message + "."
    return message + ". Allowing partial offload would keep some layers on the CPU (slower)."


def command_lines(p: planning.LlamaCppPlan, source: GgufSource) -> dict[str, str]:
    """``llama-server`` and its ``docker run``, from the adapter's own renderer; for a Hub
    file, the path is the repo's (the file is fetched first)."""
    # the launch's own bridge; the per-GPU overhead only sizes leases, not the command
    argv = commands.llama_argv(from_llamacpp_plan(p, gpu_overhead_bytes=0), source.engine_model)
    gpus = [g.index for g in p.gpus]
    return {
        "llamacpp": shlex.join(argv),
        "docker": commands.llama_docker_line(argv, source.engine_model, gpus),
    }


def default_name(source: GgufSource) -> str:
    """The file's name without its extension: ``demo-Q8_0.gguf`` → ``demo-q8-0``."""
    stem = source.engine_model.rsplit("/", 1)[-1].removesuffix(".gguf")
    return (slugify(stem.replace(".", "-").replace("_", "-")) or "model")[:63].strip("-")


def _spread(p: planning.LlamaCppPlan, target: PlanTarget) -> bool:
    """Whether Launch names the plan's GPUs and split: a real host's plan over several GPUs.
    A simulated host runs llama-server on the CPU with one simulated GPU leased."""
    return len(p.gpus) > 1 and not target.simulated


def launch_fields(
    p: planning.LlamaCppPlan, source: GgufSource, target: PlanTarget, options: GgufOptions
) -> dict[str, str]:
    """The fields Launch posts to deployment_new: engine llamacpp, the quantization's
    reference, and the plan's settings and split made explicit."""
    spread = _spread(p, target)
    s = p.settings
    return {
        "model_ref": source.ref,
        "revision": source.revision,
        "host": target.hosts[0].name if target.hosts else "",
        "engine": "llamacpp",
        "max_model_len": str(s.context_tokens or ""),
        "max_num_seqs": str(s.slots),
        "cache_type_k": s.cache_type_k,
        "cache_type_v": s.cache_type_v,
        "flash_attn": "on" if s.flash_attn else "off",
        "split_mode": s.split_mode,
        "tensor_split": ",".join(share_text(x) for x in p.tensor_split) if spread else "",
        "gpus": ",".join(str(g.index) for g in p.gpus) if spread else "",
        "allow_partial_offload": "on" if options.allow_partial_offload else "",
        "dtype": "auto",
        "kv_cache_dtype": "auto",
        "replicas": "1",
        "placement": "spread",
    }


def launch_note(p: planning.LlamaCppPlan, target: PlanTarget) -> str:
    if not target.hosts:
        return PICK_HOST
    if target.simulated:
        return (
            "Launch starts llama-server on this host's CPU (simulated GPUs: one is leased "
            "for the engine's share)."
        )
    where = ", ".join(str(g.index) for g in p.gpus)
    split = f", -ts {ratios_text({'tensor_split': p.tensor_split})}" if _spread(p, target) else ""
    return f"Launch starts llama-server on GPU {where}{split}."


def gguf_panel(
    source: GgufSource, spec: planning.GgufSpec, target: PlanTarget, options: GgufOptions
) -> tuple[dict[str, Any], bool]:
    """The GGUF plan panel's JSON and whether the chosen plan fits."""
    started = time.perf_counter()
    request = options.request()
    plans = planning.plan_llamacpp(spec, gguf_inventory(target), request)
    chosen = plans[0]
    plan = plan_json(chosen, spec, request)
    plan["split_text"] = split_text(plan)
    plan["tensor_split_text"] = ratios_text(plan)
    plan["rows"] = device_rows(plan)
    plan["chart"] = chart(plan)
    plan["flags_text"] = " ".join(plan["flags"])
    plan["commands"] = command_lines(chosen, source)
    plan["launch"] = launch_fields(chosen, source, target, options)
    plan["launch_note"] = launch_note(chosen, target)
    payload: dict[str, Any] = {
        "ok": chosen.fits,
        "engine": plan["engine"],
        "target": {
            "label": target.label,
            "simulated": target.simulated,
            "host": bool(target.hosts),
            "hosts": [h.name for h in target.hosts],
            "online": target.online,
        },
        "model_ref": source.ref,
        "revision": source.revision,
        "plan": plan,
        "alternatives": [_alternative(p, p is chosen) for p in plans],
        "error": None if chosen.fits else no_fit_message(chosen, options),
        "notice": target_notice(target),
    }
    payload["server_ms"] = round((time.perf_counter() - started) * 1000, 2)
    return payload, chosen.fits
