"""The write path for LoRA adapters on a running vLLM deployment: load and unload, on every
replica, without a restart.

Each service checks everything before it writes (the caller, the deployment's LoRA settings,
the name, the adapter against the model: deployments.planning.adapter_problems), writes the
rows and the audit row in one transaction, and on commit asks each running replica's host
worker to fetch the adapter and load it into its engine (deployments.host.adapters). A replica
that starts later (scale-up, restart, relaunch, start on demand) loads the deployment's
adapters before it enters the gateway's rotation.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from controlpanel.audit import audit_record
from controlpanel.roles import Role
from deployments import planning
from deployments.catalog.adapters import AdapterSource, AdapterSourceError, read_adapter
from deployments.catalog.sources import ModelSourceError, load_spec, resolve_source
from deployments.lifecycle import limits
from deployments.lifecycle.checks import require_role
from deployments.lifecycle.dispatch import send
from deployments.lifecycle.errors import DeploymentError
from deployments.models import (
    HOLDS_NAME,
    TERMINAL,
    AdapterReplica,
    AdapterStatus,
    Deployment,
    DeploymentAdapter,
    Engine,
    Status,
)
from deployments.models.adapters import WANTED
from teams import membership

LOAD_TASK = "deployments.adapter_load"
UNLOAD_TASK = "deployments.adapter_unload"
# Far above what anyone serves from one base model on one engine; bounds the work of a page.
MAX_ADAPTERS = 64
# A replica in these states loads the adapter: at once when running, else as it (re)starts.
_UP = frozenset(
    {Status.PENDING, Status.STARTING, Status.RUNNING, Status.RESTARTING, Status.SLEEPING}
    | {Status.SCALED_TO_ZERO}
)


def adapter_load(
    *,
    user: Any,
    deployment: Deployment,
    name: str,
    source: str,
    revision: str = "",
    http_request: HttpRequest | None = None,
    hub_token: str | None = None,
) -> DeploymentAdapter:
    """Load the adapter `source` under `name` on every replica of `deployment`."""
    require_role(user, Role.OPERATOR)
    first = _first(deployment)
    _check_may_act(user, first, "loading an adapter onto")
    lora = lora_of(first)
    name = _check_adapter_name(name)
    try:
        found = read_adapter(source, revision, token=hub_token)
    except AdapterSourceError as exc:
        raise DeploymentError(f"Adapter {source!r}: {exc}") from exc
    _check_fits(first, found, lora, hub_token)
    with transaction.atomic():
        rows = list(first.group().select_for_update().order_by("replica_index"))
        if not any(r.status in _UP for r in rows):
            raise DeploymentError(f"{first.name} is not running; launch it again first.")
        wanted = _wanted(first).count()
        if wanted >= MAX_ADAPTERS:
            raise DeploymentError(
                f"{first.name} already has {wanted} adapters (at most {MAX_ADAPTERS})."
            )
        adapter = _create(user, first, name, found)
        placements = [
            AdapterReplica.objects.create(adapter=adapter, replica=r)
            for r in rows
            if r.status in _UP
        ]
        _audit(user, "deployment.adapter_load", first, adapter, http_request, placements, lora)
        for p in placements:
            if rows_by_pk(rows)[p.replica_id].status == Status.RUNNING:
                transaction.on_commit(partial(_send, LOAD_TASK, p))
    return adapter


def adapter_unload(
    *,
    user: Any,
    deployment: Deployment,
    name: str,
    http_request: HttpRequest | None = None,
) -> DeploymentAdapter:
    """Take the adapter `name` off every replica. The gateway stops routing to it at once;
    streams already running on it finish (vLLM's unload removes the name, not a request)."""
    require_role(user, Role.OPERATOR)
    first = _first(deployment)
    _check_may_act(user, first, "unloading an adapter from")
    with transaction.atomic():
        adapter = _wanted(first).select_for_update().filter(name=name.strip().lower()).first()
        if adapter is None:
            raise DeploymentError(f"{first.name} has no adapter named {name!r} loaded.")
        adapter.status = AdapterStatus.UNLOADING
        adapter.save(update_fields=["status"])
        placements = list(adapter.placements.select_related("replica"))
        live = [p for p in placements if p.replica.status == Status.RUNNING]
        AdapterReplica.objects.filter(adapter=adapter).exclude(pk__in=[p.pk for p in live]).update(
            status=AdapterStatus.UNLOADED, updated_at=timezone.now()
        )
        if not live:
            _mark_unloaded(adapter)
        _audit(user, "deployment.adapter_unload", first, adapter, http_request, live, None)
        for p in live:
            transaction.on_commit(partial(_send, UNLOAD_TASK, p))
    return adapter


def keep_adapters(old: Deployment, new: Deployment, *, user: Any) -> list[str]:
    """A relaunch's adapters: those wanted on the old deployment move to the new one, to be
    loaded by each of its replicas as it starts. Returns their names."""
    kept = []
    with transaction.atomic():
        for adapter in _wanted(old).select_for_update():
            _mark_unloaded(adapter, note=f"kept by the relaunch as deployment {new.pk}")
            copy = _copy(adapter, new, user)
            for replica in new.group():
                AdapterReplica.objects.create(adapter=copy, replica=replica)
            kept.append(copy.name)
    return kept


def rows_by_pk(rows: list[Deployment]) -> dict[int, Deployment]:
    return {r.pk: r for r in rows}


def _first(deployment: Deployment) -> Deployment:
    return Deployment.objects.select_related("host", "team").get(pk=deployment.group_id)


def _check_may_act(user: Any, first: Deployment, doing: str) -> None:
    if problem := membership.act_problem(user, first.team_id, first.name, doing):
        raise DeploymentError(problem)


def lora_of(first: Deployment) -> planning.LoraConfig:
    args = first.snapshot.engine_args
    if first.engine != Engine.VLLM or not args.enable_lora:
        raise DeploymentError(
            f"{first.name} was launched without LoRA: launch it again on vLLM with LoRA "
            "enabled (enable_lora, max_loras, max_lora_rank) to load adapters."
        )
    return planning.LoraConfig(
        max_loras=args.max_loras or planning.DEFAULT_MAX_LORAS,
        max_lora_rank=args.max_lora_rank or planning.DEFAULT_MAX_LORA_RANK,
        max_cpu_loras=args.max_cpu_loras,
    )


def _check_adapter_name(name: str) -> str:
    name = name.strip().lower()
    if problem := limits.name_problem(name):
        raise DeploymentError(problem.replace("Name", "Adapter name", 1))
    if Deployment.objects.filter(name=name, status__in=list(HOLDS_NAME)).exists():
        raise DeploymentError(
            f"Adapter name {name!r} is a deployment's name: requests for it would be ambiguous."
        )
    taken = DeploymentAdapter.objects.filter(name=name, status__in=list(WANTED | {"unloading"}))
    for other in taken.select_related("deployment"):
        if not _ended(other.deployment):
            raise DeploymentError(
                f"An adapter named {name!r} is already loaded on {other.deployment.name}."
            )
    return name


def _ended(first: Deployment) -> bool:
    return all(r.status in TERMINAL for r in first.group())


def _check_fits(
    first: Deployment, found: AdapterSource, lora: planning.LoraConfig, hub_token: str | None
) -> None:
    """The adapter against the deployment's model, before any engine sees it."""
    try:
        source = resolve_source(first.snapshot.model_ref or first.model_id, first.revision)
        spec = load_spec(source, token=None if source.is_local else hub_token)
    except ModelSourceError as exc:
        raise DeploymentError(f"The model of {first.name} could not be read: {exc}") from exc
    served = source.ref.removeprefix("local:") if source.is_local else source.ref
    problems = planning.adapter_problems(
        found.spec, spec, max_lora_rank=lora.max_lora_rank, served_model=served
    )
    if problems:
        raise DeploymentError(
            f"Adapter {found.ref} does not fit {first.name}: " + "; ".join(problems) + "."
        )


def _wanted(first: Deployment) -> QuerySet[DeploymentAdapter]:
    return DeploymentAdapter.objects.filter(deployment=first, status__in=list(WANTED))


def _create(user: Any, first: Deployment, name: str, found: AdapterSource) -> DeploymentAdapter:
    spec = found.spec
    ended = DeploymentAdapter.objects.filter(name=name, status__in=["loading", "loaded"])
    for old in ended.select_for_update():  # on a deployment that ended (checked above)
        _mark_unloaded(old, note=f"{old.deployment.name} had ended")
    try:
        with transaction.atomic():
            return DeploymentAdapter.objects.create(
                deployment=first,
                name=name,
                source=found.ref,
                revision=found.revision,
                base_model=spec.base_model[:300],
                rank=spec.rank,
                alpha=spec.alpha,
                target_modules=list(spec.modules),
                size_bytes=spec.size_bytes,
                added_by=user,
            )
    except IntegrityError:
        raise DeploymentError(f"An adapter named {name!r} is already loaded.") from None


def _copy(adapter: DeploymentAdapter, new: Deployment, user: Any) -> DeploymentAdapter:
    fields = ("name", "source", "revision", "base_model", "rank", "alpha", "target_modules")
    return DeploymentAdapter.objects.create(
        deployment=new,
        size_bytes=adapter.size_bytes,
        added_by=user,
        **{f: getattr(adapter, f) for f in fields},
    )


def _mark_unloaded(adapter: DeploymentAdapter, note: str = "") -> None:
    adapter.status = AdapterStatus.UNLOADED
    adapter.unloaded_at = timezone.now()
    adapter.error = note or adapter.error
    adapter.save(update_fields=["status", "unloaded_at", "error"])
    adapter.placements.exclude(status=AdapterStatus.UNLOADED).update(
        status=AdapterStatus.UNLOADED, updated_at=timezone.now()
    )


def _audit(
    user: Any,
    action: str,
    first: Deployment,
    adapter: DeploymentAdapter,
    http_request: HttpRequest | None,
    placements: list[AdapterReplica],
    lora: planning.LoraConfig | None,
) -> None:
    detail: dict[str, Any] = {
        "deployment": first.name,
        "adapter": adapter.name,
        "source": adapter.source,
        "revision": adapter.revision,
        "replica_ids": [p.replica_id for p in placements],
        "hosts": sorted({p.replica.host.name for p in placements}),
    }
    if lora is not None:
        detail |= {
            "rank": adapter.rank,
            "base_model": adapter.base_model,
            "target_modules": adapter.target_modules,
            "size_bytes": adapter.size_bytes,
            "note": slots_note(first, lora),
        }
    audit_record(
        actor=user,
        action=action,
        target_type="deployment",
        target_id=first.pk,
        request=http_request,
        detail=detail,
    )


def slots_note(first: Deployment, lora: planning.LoraConfig) -> str:
    """What vLLM does with more adapters than its slots (lora/worker_manager.py, 0.32)."""
    count = _wanted(first).count()
    if count <= lora.max_loras:
        return ""
    text = (
        f"{count} adapters on {lora.max_loras} slots: at most {lora.max_loras} run in one "
        "batch, requests for the others wait for a slot"
    )
    if count > lora.cached:
        text += (
            f"; vLLM keeps {lora.cached} loaded (max_cpu_loras) and reads the least recently "
            "used again from this host's disk on its next request"
        )
    return text


def _send(task: str, placement: AdapterReplica) -> None:
    send(task, [placement.pk], placement.replica.host.name)
