"""The read side of LoRA adapters: a deployment's adapters with their replicas, for its page
and the API; the catalog's adapters a deployment may load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments.catalog.adapters import LocalAdapter, list_local_adapters
from deployments.models import AdapterStatus, Deployment, DeploymentAdapter
from deployments.models.adapters import HOLDS_NAME
from deployments.planning import DEFAULT_MAX_LORA_RANK, DEFAULT_MAX_LORAS


@dataclass(frozen=True, slots=True)
class AdapterRow:
    adapter: DeploymentAdapter
    replicas: list[dict[str, Any]]  # {"id", "index", "status", "error"} per replica

    @property
    def loaded_on(self) -> int:
        return sum(r["status"] == AdapterStatus.LOADED for r in self.replicas)


def adapters_of(deployment: Deployment, *, ended: bool = False) -> list[AdapterRow]:
    """The adapters on `deployment` (any of its replicas) that hold their name; with `ended`,
    the last 20 unloaded or failed ones too."""
    rows = DeploymentAdapter.objects.filter(deployment_id=deployment.group_id)
    live = list(rows.filter(status__in=list(HOLDS_NAME)).prefetch_related("placements__replica"))
    if ended:
        old = rows.exclude(status__in=list(HOLDS_NAME)).order_by("-created_at")[:20]
        live += list(old.prefetch_related("placements__replica"))
    return [AdapterRow(a, _replicas(a)) for a in live]


def _replicas(adapter: DeploymentAdapter) -> list[dict[str, Any]]:
    return [
        {
            "id": p.replica_id,
            "index": p.replica.replica_index,
            "status": p.status,
            "error": p.error,
        }
        for p in sorted(adapter.placements.all(), key=lambda p: p.replica.replica_index)
    ]


def adapter_out(row: AdapterRow) -> dict[str, Any]:
    a = row.adapter
    return {
        "name": a.name,
        "source": a.source,
        "revision": a.revision,
        "status": a.status,
        "base_model": a.base_model,
        "rank": a.rank,
        "alpha": a.alpha,
        "target_modules": list(a.target_modules),
        "size_bytes": a.size_bytes,
        "error": a.error,
        "parent": a.deployment.name,
        "replicas": row.replicas,
        "created_at": a.created_at,
    }


def local_choices() -> tuple[LocalAdapter, ...]:
    """The adapters under the model roots, for the deployment page's choice."""
    return tuple(a for a in list_local_adapters() if a.spec is not None)


def page_context(first: Deployment) -> dict[str, Any]:
    """The deployment page's LoRA section: its slots (None when launched without LoRA), its
    adapters and the local ones it may load."""
    args = first.snapshot.engine_args
    if not args.enable_lora:
        return {"lora": None}
    return {
        "lora": {
            "max_loras": args.max_loras or DEFAULT_MAX_LORAS,
            "max_lora_rank": args.max_lora_rank or DEFAULT_MAX_LORA_RANK,
            "max_cpu_loras": args.max_cpu_loras or args.max_loras or DEFAULT_MAX_LORAS,
        },
        "adapters": adapters_of(first, ended=True),
        "adapter_choices": local_choices(),
    }
