"""``manage.py plan`` for a GGUF model: the llama.cpp plan as text, or its JSON view.

A GGUF reference is a ``.gguf`` path, ``local:<root>/<file>.gguf`` or ``org/repo:QUANT``; the
vLLM options that have a llama.cpp meaning carry it (``--max-model-len`` is ``-c``,
``--max-num-seqs`` is ``-np``); the others are vLLM's and are ignored here.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deployments import planning
from deployments.catalog.gguf_plan import (
    CACHE_TYPES,
    GgufOptions,
    parse_tensor_split,
    plan_json,
    plans_json,
    size_text,
    split_text,
)
from deployments.catalog.gguf_read import GgufReadError, local_gguf_spec


def add_gguf_arguments(parser: argparse.ArgumentParser) -> None:
    """The llama.cpp options of ``manage.py plan`` (used only for a GGUF model)."""
    group = parser.add_argument_group("GGUF models (llama.cpp)")
    group.add_argument("--ctk", choices=CACHE_TYPES, default="f16", help="K cache type (-ctk)")
    group.add_argument("--ctv", choices=CACHE_TYPES, default="f16", help="V cache type (-ctv)")
    group.add_argument("--no-fa", dest="no_fa", action="store_true", help="-fa off")
    group.add_argument("--split-mode", dest="split_mode", choices=("layer", "row"), default="layer")
    group.add_argument("--tensor-split", dest="tensor_split", help="pin -ts, e.g. 3,2")
    group.add_argument(
        "--allow-partial-offload",
        dest="allow_partial_offload",
        action="store_true",
        help="keep layers on the CPU when the GPUs are too small (slower; the cost is stated)",
    )


def is_gguf_model(ref: str) -> bool:
    """As ``gguf_sources.is_gguf_ref`` (a ``.gguf`` path, or ``org/repo:QUANT``), without
    importing the catalog's Django-side modules."""
    ref = ref.strip()
    return ref.lower().endswith(".gguf") or (":" in ref and not ref.startswith("local:"))


def options_from(options: Mapping[str, Any]) -> GgufOptions:
    return GgufOptions(
        context_tokens=options.get("max_model_len") or 0,
        slots=options.get("max_num_seqs") or 1,
        cache_type_k=options.get("ctk") or "f16",
        cache_type_v=options.get("ctv") or "f16",
        flash_attn=not options.get("no_fa"),
        split_mode=options.get("split_mode") or "layer",
        tensor_split=parse_tensor_split(options.get("tensor_split") or ""),
        allow_partial_offload=bool(options.get("allow_partial_offload")),
    )


def load_gguf(ref: str) -> planning.GgufSpec:
    """A ``.gguf`` file on disk, else a catalog reference (MODEL_ROOTS or the Hub: Django)."""
    path = Path(ref).expanduser()
    if path.is_file():
        try:
            return local_gguf_spec(path)
        except GgufReadError as exc:
            raise planning.PlanningError(str(exc)) from None
    from deployments.catalog.gguf_sources import resolve_gguf
    from deployments.catalog.sources import ModelSourceError

    try:
        return resolve_gguf(ref)[1]
    except ModelSourceError as exc:
        raise planning.PlanningError(str(exc)) from None


def run_gguf_plan(
    options: Mapping[str, Any], spec: planning.GgufSpec, inventory: planning.Inventory
) -> str:
    gguf = options_from(options)
    request = gguf.request()
    plans = planning.plan_llamacpp(spec, inventory, request)
    if options.get("json"):
        return json.dumps(plans_json(plans, spec, request), indent=2)
    return render(plans, spec, request)


def render(
    plans: tuple[planning.LlamaCppPlan, ...],
    spec: planning.GgufSpec,
    request: planning.LlamaCppRequest,
) -> str:
    best = plan_json(plans[0], spec, request)
    verdict = "fits" if best["fits"] else "does NOT fit"
    lines = [
        f"llama.cpp on {best['host']}: {split_text(best)}; -ngl {best['gpu_layers']} of "
        f"{best['layers_total']}; {best['context_cells']} context cells: {verdict}",
        f"{'device':>8} {'layers':>22} {'weights':>10} {'KV':>10} {'compute':>10} "
        f"{'other':>10} {'free':>10}",
    ]
    for d in [*best["devices"], best["cpu"]]:
        other = d["overhead_bytes"] + d["output_buffer_bytes"]
        free = size_text(d["left_bytes"]) if "left_bytes" in d else "-"
        lines.append(
            f"{d['device']:>8} {d['layer_span']:>22} {_g(d['weights_bytes']):>10} "
            f"{_g(d['kv_bytes']):>10} {_g(d['compute_bytes']):>10} {_g(other):>10} {free:>10}"
        )
    if best["partial_offload"]:
        lines.append("cost: " + best["partial_offload"]["text"])
    lines += [f"note: {best['note']}"] if best["note"] else []
    lines += [f"reason: {r}" for r in best["reasons"]]
    lines += [f"warning: {w}" for w in best["warnings"]]
    lines.append("flags: " + " ".join(best["flags"]))
    lines += ["", "Other placements:"]
    for p in plans[1:]:
        head = f"  {p.host} GPUs {','.join(str(g.index) for g in p.gpus)} -ngl {p.gpu_layers}"
        lines.append(head + (f": fits ({p.note})" if p.fits else f": rejected: {p.reasons[0]}"))
    if len(plans) == 1:
        lines.append("  (none)")
    return "\n".join(lines)


def _g(n_bytes: int) -> str:
    return size_text(n_bytes)
