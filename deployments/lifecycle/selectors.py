"""Read paths for the deployment pages."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import redis
from django.db.models import Count, Q
from django.http import QueryDict

from controlpanel.models import AuditEvent
from deployments.catalog.selectors import concurrency_text
from deployments.engines import platforms
from deployments.handoff.snapshot import PlanSnapshot
from deployments.lifecycle import adapter_selectors
from deployments.lifecycle.accuracy import deployment_starts
from deployments.lifecycle.engine_memory import engine_memory_table
from deployments.lifecycle.launchphases import launch_steps
from deployments.lifecycle.planned_vs_measured import memory_table
from deployments.lifecycle.shares import share_table
from deployments.live import enginelog
from deployments.models import HOLDS_NAME, Deployment, Status, replicas
from monitoring.models import DeviceKind, Host
from playground.gateway import balance

STATUS_CHOICES = Status.choices


@dataclass(frozen=True, slots=True)
class ListFilters:
    status: str = ""
    host: str = ""
    owner: str = ""
    team: str = ""

    @classmethod
    def from_query(cls, query: QueryDict) -> ListFilters:
        return cls(
            query.get("status", ""),
            query.get("host", ""),
            query.get("owner", "").strip(),
            query.get("team", ""),
        )


@dataclass(frozen=True, slots=True)
class ListRow:
    """One deployment of the list: its first replica's row, and the state of all of them."""

    d: Deployment
    state: replicas.GroupState
    gpus: list[list[int]]  # the GPU indices each replica holds now

    @property
    def grouped(self) -> bool:
        return self.state.total > 1


def deployment_rows(filters: ListFilters) -> list[ListRow]:
    """One row per deployment (its replicas folded in); a filter matches any of its replicas."""
    rows = (
        Deployment.objects.filter(replica_of__isnull=True)
        .select_related("host", "created_by", "team")
        .prefetch_related("leases__gpu", "replicas__leases__gpu", "ray_nodes__host")
    )
    if filters.status:
        rows = rows.filter(Q(status=filters.status) | Q(replicas__status=filters.status))
    if filters.host:
        rows = rows.filter(Q(host__name=filters.host) | Q(replicas__host__name=filters.host))
    if filters.owner:
        rows = rows.filter(created_by__username__icontains=filters.owner)
    if filters.team:
        rows = rows.filter(team__name=filters.team)
    return [_list_row(d) for d in rows.distinct()]


def active_rows(team: str = "") -> list[ListRow]:
    """The deployments with a replica still up (the dashboard's list), their replicas folded;
    `team`: only that team's. A scaled-to-zero one too: a request starts it again."""
    live = list(HOLDS_NAME)
    rows = (
        Deployment.objects.filter(replica_of__isnull=True, **({"team__name": team} if team else {}))
        .filter(Q(status__in=live) | Q(replicas__status__in=live))
        .select_related("host", "team")
        .prefetch_related("leases__gpu", "replicas__leases__gpu")
        .order_by("host__name", "name")
    )
    return [_list_row(d) for d in rows.distinct()]


def _list_row(d: Deployment) -> ListRow:
    kept = [r for r in d.replicas.all() if not r.retired]
    members = [d, *sorted(kept, key=lambda r: r.replica_index)]
    gpus = [sorted(lease.gpu.index for lease in m.leases.all() if lease.active) for m in members]
    return ListRow(d, replicas.overall([m.status for m in members]), gpus)


@dataclass(frozen=True, slots=True)
class ReplicaRow:
    d: Deployment
    gpus: list[int]  # held now; the planned ones once the leases are released
    in_flight: int = 0  # gateway requests on it now, across web processes

    @property
    def gpu_text(self) -> str:
        return ", ".join(str(i) for i in self.gpus) or "none"


def replica_rows(deployment: Deployment) -> list[ReplicaRow]:
    """Every replica of the deployment ``deployment`` belongs to, the first first."""
    out = []
    rows = list(deployment.group().select_related("host").prefetch_related("leases__gpu"))
    counts = balance.in_flight([r.pk for r in rows])
    for r in rows:
        held = sorted(lease.gpu.index for lease in r.leases.all() if lease.active)
        gpus = held or list(r.snapshot.gpu_indices)
        out.append(ReplicaRow(r, gpus, counts.get(r.pk, 0)))
    return out


def host_names() -> list[str]:
    return list(Host.objects.values_list("name", flat=True))


def planned_memory(deployment: Deployment) -> list[dict[str, Any]]:
    plan = deployment.snapshot
    return [
        {"gpu": index, **asdict(mem)}
        for index, mem in zip(plan.gpu_indices, plan.per_gpu, strict=False)
    ]


def detail_context(deployment: Deployment) -> dict[str, Any]:
    group = replica_rows(deployment)
    first = group[0].d if group else deployment
    ids = {str(deployment.pk), str(first.pk)}  # a replica's page shows the launch's audit too
    audit = AuditEvent.objects.filter(target_type="deployment", target_id__in=ids)
    return {
        "d": deployment,
        "first": first,
        "replicas": group if len(group) > 1 else [],
        "group": replicas.overall([r.d.status for r in group] or [deployment.status]),
        "events": deployment.events.all(),
        "leases": deployment.leases.select_related("gpu"),
        "planned": planned_memory(deployment),
        "memory": memory_table(deployment),
        "engine_memory": engine_memory_table(deployment),
        "starts": deployment_starts(deployment.pk),
        "shares": share_table(deployment),
        "audit": audit[:20],
        "diagnosis": deployment.diagnosis or None,
        "plan_figures": plan_figures(deployment.snapshot),
        "plan_kind": plan_kind(deployment.snapshot),
        "log": log_panel(deployment),
        "steps": launch_steps(deployment),
        "idle_words": platforms.idle_words(deployment.engine, deployment.engine_device),
        **adapter_selectors.page_context(first),
    }


@dataclass(frozen=True, slots=True)
class LogPanel:
    text: str
    last_id: str  # of the last line shown; "" when it is a saved tail or there is none
    live: bool  # the page follows the engine over the websocket
    note: str


def log_panel(deployment: Deployment) -> LogPanel:
    """The engine's last lines: from Redis while it may run, from the row once it ended."""
    if not deployment.is_active and deployment.log_tail:
        return LogPanel(
            deployment.log_tail, "", False, "The engine's last lines, saved when it ended."
        )
    try:
        lines = enginelog.recent(deployment.pk)
    except redis.RedisError:
        return LogPanel("", "", deployment.is_active, "The log store (Redis) does not answer.")
    text = "\n".join(line for _, line in lines)
    note = "" if lines else ("No output yet." if deployment.is_active else "No log was saved.")
    return LogPanel(text, lines[-1][0] if lines else "", deployment.is_active, note)


def plan_figures(plan: PlanSnapshot) -> dict[str, str]:
    """The plan's KV cache tokens and max concurrency as people read them (305,855,280)."""
    tokens, concurrency = plan.kv_cache_tokens, plan.max_concurrency
    return {
        "kv_cache_tokens": "?" if tokens is None else f"{int(tokens):,}",
        "max_concurrency": "?" if concurrency is None else concurrency_text(float(concurrency)),
    }


def plan_kind(plan: PlanSnapshot) -> dict[str, str]:
    """An embedding model's kind in words, and "yes" when it keeps no KV cache (an encoder:
    0 tokens planned); empty strings for a generative model."""
    return {
        "kind": "embedding model" if plan.embeds else "",
        "no_kv": "yes" if plan.embeds and plan.kv_cache_tokens == 0 else "",
    }


@dataclass(frozen=True, slots=True)
class HostEngines:
    name: str
    simulated: bool
    engines: tuple[platforms.HostEngine, ...]


def launch_hosts() -> list[HostEngines]:
    """Each host a launch may name, with the engines it runs and where (the launch form)."""
    rows = (
        Host.objects.in_service()
        .values_list("name", "simulated")
        .annotate(
            gpu_count=Count("gpus", filter=Q(gpus__kind=DeviceKind.GPU, gpus__present=True)),
            cpu_count=Count("gpus", filter=Q(gpus__kind=DeviceKind.CPU, gpus__present=True)),
        )
    )
    return [
        HostEngines(
            name, simulated, platforms.host_engines(simulated=simulated, gpus=gpus, cpu=cpus > 0)
        )
        for name, simulated, gpus, cpus in rows
    ]
