"""Hosts and their GPUs, and planning a model on them, through the API (read scope)."""

from collections import defaultdict
from typing import Any

from django.db.models import Sum
from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router

from controlpanel.api.auth import READ, ApiError
from controlpanel.api.schemas import REFUSALS, GpuOut, HostOut, Message, PlanOut, PlanQuery
from deployments import planning
from deployments.catalog.gguf_sources import is_gguf_ref
from deployments.catalog.gguf_views import GgufPlanForm
from deployments.catalog.hub import HubError
from deployments.catalog.sources import ModelSourceError
from deployments.catalog.views import PlanForm, hub_status
from deployments.models import GpuLease
from monitoring.models import Gpu, Host

router = Router(tags=["fleet"])


@router.get("/hosts", response={200: list[HostOut], **REFUSALS}, auth=READ)
def host_list(request: HttpRequest) -> list[dict[str, Any]]:
    """Hosts in service with their GPUs."""
    now = timezone.now()
    hosts = list(Host.objects.in_service())
    gpus = _gpus(Gpu.objects.gpus().filter(host__in=hosts))
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for gpu in gpus:
        by_host[gpu["host"]].append(gpu)
    return [
        {
            "name": h.name,
            "online": h.is_online(now),
            "simulated": h.simulated,
            "backend": h.backend,
            "last_heartbeat": h.last_heartbeat,
            "gpus": by_host[h.name],
        }
        for h in hosts
    ]


@router.get("/gpus", response={200: list[GpuOut], **REFUSALS}, auth=READ)
def gpu_list(request: HttpRequest, host: str = "") -> list[dict[str, Any]]:
    """Every GPU of the hosts in service (of one host with `host`), with what is reserved."""
    rows = Gpu.objects.gpus().filter(host__retired_at__isnull=True)
    return _gpus(rows.filter(host__name=host) if host else rows)


def _gpus(rows: Any) -> list[dict[str, Any]]:
    rows = rows.select_related("host").order_by("host__name", "index")
    held = dict(
        GpuLease.objects.filter(active=True, gpu__in=rows)
        .values("gpu")
        .annotate(total=Sum("memory_bytes"))
        .values_list("gpu", "total")
    )
    return [
        {
            "host": g.host.name,
            "index": g.index,
            "uuid": g.uuid,
            "name": g.name,
            "memory_total_bytes": g.memory_total_bytes,
            "reserved_bytes": held.get(g.pk) or 0,
            "present": g.present,
        }
        for g in rows
    ]


@router.get(
    "/plan",
    response={200: PlanOut, 404: Message, 429: Message, 502: Message, 503: Message, **REFUSALS},
    auth=READ,
)
def plan(request: HttpRequest, query: Query[PlanQuery]) -> dict[str, Any]:
    """How a model would be split over a host's GPUs, several hosts (target=fleet, or
    target=picked with hosts=a&hosts=b) or what-if GPUs: the plan panel's answer. `ok` false: no layout fits, and `error` says why. A GGUF model (org/repo:QUANT, local:<root>/<file>.gguf) is planned for llama.cpp on one machine: `plan` is then a LlamaCppPlanOut."""
    data = query.dict()
    hosts = data.pop("hosts")
    fields = {k: "" if v is None else v for k, v in data.items()}
    form: PlanForm | GgufPlanForm = (
        GgufPlanForm(fields) if is_gguf_ref(data["ref"]) else PlanForm(fields)
    )
    if not form.is_valid():
        raise ApiError(422, f"query.{form.first_error()}")
    try:
        payload, _ = form.plan(request.session, hosts)
    except HubError as exc:
        raise ApiError(hub_status(exc), exc.message) from exc
    except (ModelSourceError, planning.PlanningError) as exc:
        raise ApiError(422, str(exc)) from exc
    return payload
