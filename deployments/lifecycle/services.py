"""The write path for deployments: create (plan, lease, audit, enqueue) and stop.

Each service is one transaction that writes the audit row with the change; the Celery task is
sent on commit, so a worker never sees a row that might still roll back.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest

from controlpanel.audit import audit_record
from controlpanel.roles import Role
from deployments import planning
from deployments.catalog.corrections import fleet_corrections
from deployments.catalog.gguf_plan import GgufOptions
from deployments.catalog.gguf_sources import GgufSource
from deployments.catalog.registered import host_inventory, planner_host
from deployments.catalog.sources import ModelSource, ModelSourceError, load_spec, resolve_source
from deployments.handoff import sealed
from deployments.handoff.snapshot import PlanSnapshot, from_plan
from deployments.lifecycle import cpu_hub, gguf_launch, launch_policy
from deployments.lifecycle.checks import check_name
from deployments.lifecycle.checks import online_host as online_host
from deployments.lifecycle.checks import require_role as require_role
from deployments.lifecycle.dispatch import enqueue as _enqueue
from deployments.lifecycle.errors import DeploymentError as DeploymentError
from deployments.lifecycle.policy import PolicySettings
from deployments.lifecycle.reservations import ReservationConflict as ReservationConflict
from deployments.lifecycle.reservations import reserve_bytes
from deployments.lifecycle.reservations import reserve_gpus as reserve_gpus
from deployments.lifecycle.spanning import check_hosts, ray_nodes, spanned_hosts
from deployments.live import drain
from deployments.models import Deployment, Engine, Status, replicas
from monitoring.models import Host
from teams import membership

# A launch that lost the race for a GPU's memory plans again on what is left, this often.
RESERVE_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    name: str
    model_ref: str
    host_name: str
    engine: str = Engine.VLLM
    revision: str = ""
    plan_request: planning.PlanRequest = field(default_factory=planning.PlanRequest)
    gpu_indices: tuple[int, ...] | None = None
    auto_restart: bool | None = None  # None: the server's SHARDBOARD_AUTO_RESTART
    # Replicas of the layout, each its own engine on its own GPUs; None: as many as fit.
    # The planner's ``plan_request.replicas`` is ignored: this field decides.
    replicas: int | None = 1
    # Further hosts the model may span (one replica, vLLM on a Ray cluster of its own); the
    # engine runs on the host of its first pipeline stage.
    hosts: tuple[str, ...] = ()
    team: str | None = None  # None: the user's only team (or none, for a user in no team)
    llamacpp: GgufOptions | None = None  # llama.cpp's own settings (the GGUF plan panel's)
    # Sleep (vLLM) or scale to zero after this long without a request; None: never
    # (lifecycle.idle; a vLLM engine with a setting starts with sleep mode).
    sleep_after_s: int | None = None
    scaling_policy: PolicySettings | None = None  # created with it (lifecycle.launch_policy)


def choose_plan(
    source: ModelSource, host: Host, request: LaunchRequest, hub_token: str | None = None
) -> tuple[planning.Plan, planning.ModelSpec]:
    try:
        spec = load_spec(source, token=hub_token)
    except ModelSourceError as exc:
        raise DeploymentError(str(exc)) from exc
    only = set(request.gpu_indices) if request.gpu_indices else None
    inventory = host_inventory(host, only_indices=only)
    if request.hosts:
        others = [planner_host(online_host(name)) for name in request.hosts]
        inventory = planning.Inventory((*inventory.hosts, *others))
    plan_request = replace(
        request.plan_request,
        model=source.engine_model,
        revision=source.revision,
        replicas=request.replicas,
        corrections=fleet_corrections(),
    )
    try:
        result = planning.plan(spec, inventory, plan_request)
    except planning.PlanningError as exc:
        raise DeploymentError(str(exc)) from exc
    if not result.plans:
        raise DeploymentError("No layout of this model fits the free GPUs of this host.")
    best = result.plans[0]
    asked = best.replicas_asked
    if not best.fits and asked and 0 < best.replicas < asked:
        raise DeploymentError(
            f"The free GPUs of {host.name} hold {best.replicas} of the {asked} replicas asked "
            f"for ({best.reasons[0]}); ask for fewer, or for max."
        )
    if not best.fits:
        raise DeploymentError("This plan does not fit: " + "; ".join(best.reasons))
    wanted = plan_request.concurrency
    if wanted is not None and best.max_concurrency < wanted and not best.context_clipped:
        raise DeploymentError(
            f"The free memory of {host.name} holds {best.max_concurrency:.1f} requests of "
            f"{best.max_model_len:,} tokens at once, not the {wanted} asked for: "
            + " ".join(planning.share_lines(best, inventory, plan_request))
        )
    return best, spec


def _engine_for(request: LaunchRequest, host: Host, source: ModelSource) -> str:
    if host.simulated and request.engine != Engine.LLAMACPP:
        return Engine.TRANSFORMERS  # on the CPU; a Hub model only if small (cpu_hub)
    return request.engine


def _plan_for(
    source: ModelSource, host: Host, request: LaunchRequest, hub_token: str | None
) -> planning.Plan:
    if not (host.simulated and not source.is_local):
        return choose_plan(source, host, request, hub_token)[0]
    try:
        plan = choose_plan(source, host, request, hub_token)[0]
    except DeploymentError as exc:
        raise DeploymentError(
            f"{cpu_hub.SIMULATED_HUB} This one could not be planned: {exc}"
        ) from exc
    if refusal := cpu_hub.refusal(plan):
        raise DeploymentError(refusal)
    return plan


def deployment_create(
    *,
    user: Any,
    request: LaunchRequest,
    http_request: HttpRequest | None = None,
    hub_token: str | None = None,
) -> Deployment:
    """Plan again, lease, audit, enqueue. `hub_token`: the launcher's own, for gated models."""
    require_role(user, Role.OPERATOR)
    try:
        team = membership.launch_team(user, request.team)
    except membership.TeamError as exc:
        raise DeploymentError(str(exc)) from exc
    name = check_name(request.name)
    if problem := gguf_launch.engine_problem(request.engine, request.model_ref):
        raise DeploymentError(problem)
    if request.engine == Engine.LLAMACPP and (
        problem := gguf_launch.layout_problem(replicas=request.replicas, hosts=request.hosts)
    ):
        raise DeploymentError(problem)
    host = online_host(request.host_name)
    if request.engine == Engine.LLAMACPP:
        source: ModelSource | GgufSource | None = None
        hub_token = gguf_launch.hub_token_for(request.model_ref, hub_token)
    else:
        source = _resolve(request)
        hub_token = None if source.is_local else (hub_token or "").strip() or None
    overrides: dict[str, Any] = {
        k: v
        for k, v in asdict(request.plan_request).items()
        # model and revision are columns of the row; replicas is the launch's own; the
        # corrections are learned again from the fleet's starts at each plan
        if v is not None and k not in ("model", "revision", "replicas", "corrections")
    }
    overrides["replicas"] = "max" if request.replicas is None else request.replicas
    if overrides.get("learned_correction") is True:
        del overrides["learned_correction"]  # the default: kept only when switched off
    auto_restart = (
        settings.SHARDBOARD_AUTO_RESTART if request.auto_restart is None else request.auto_restart
    )
    options: dict[str, Any] = {
        "overrides": overrides,
        "auto_restart": bool(auto_restart),
        "hub_token": hub_token,
        "team": team,
        "sleep_after_s": request.sleep_after_s,
        "scaling_policy": request.scaling_policy,
    }
    check_hosts(request.host_name, request.hosts, request.replicas)
    if refused := launch_policy.refusal(
        request.scaling_policy, replicas=request.replicas, hosts=request.hosts
    ):
        raise DeploymentError(refused.message)
    for attempt in range(RESERVE_ATTEMPTS):
        if not isinstance(source, ModelSource):  # llama.cpp: its GGUF plans on each attempt
            gguf = gguf_launch.plan_gguf(
                host=host,
                model_ref=request.model_ref,
                plan_request=request.plan_request,
                gpu_indices=request.gpu_indices,
                options=request.llamacpp,
                replicas=request.replicas or 1,
                hub_token=hub_token,
            )
            source, snapshot = gguf.source, gguf_launch.snapshot(gguf, options["overrides"])
            placed: tuple[planning.Plan | None, PlanSnapshot] = (None, snapshot)
            lead, engine = host, str(Engine.LLAMACPP)
        else:
            plan = _plan_for(source, host, request, hub_token)
            placed = (plan, from_plan(plan, model_ref=source.ref, request=options["overrides"]))
            lead = spanned_hosts(plan, host)[0]
            # only vLLM's Ray executor runs one model over several hosts
            engine = Engine.VLLM if plan.multi_host else _engine_for(request, lead, source)
        if engine == Engine.TRANSFORMERS and placed[1].embeds:
            # transformers 5.23's server routes no /v1/embeddings (cli/serving/server.py)
            raise DeploymentError(
                f"{source.ref} is an embedding model: transformers serve cannot serve it (it "
                "has no /v1/embeddings route). Launch it on vLLM, on a GPU host."
            )
        try:
            return _create(user, name, lead, source, engine, placed, options, http_request)
        except ReservationConflict:
            if attempt == RESERVE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # the loop returns or raises


def _resolve(request: LaunchRequest) -> ModelSource:
    try:
        return resolve_source(request.model_ref, request.revision)
    except ModelSourceError as exc:
        raise DeploymentError(str(exc)) from exc


@transaction.atomic
def _create(
    user: Any,
    name: str,
    host: Host,
    source: ModelSource | GgufSource,
    engine: str,
    placed: tuple[planning.Plan | None, PlanSnapshot],
    options: dict[str, Any],
    http_request: HttpRequest | None,
) -> Deployment:
    """`placed`: the vLLM planner's plan (None for a llama.cpp launch) and the snapshot."""
    plan, snapshot = placed
    count = max(len(snapshot.gpus), 1)
    try:
        with transaction.atomic():
            rows = _create_rows(user, name, host, source, engine, snapshot, options, count)
    except IntegrityError:
        raise DeploymentError(f"A deployment named {name!r} is already active.") from None
    if plan is None:  # llama.cpp: each replica leases the first one's bytes on its own GPUs
        leases = [zip(slots, snapshot.per_gpu, strict=True) for slots in snapshot.gpus]
        reserve_bytes(
            rows, host, [{(host.name, g.index): f.total_bytes for g, f in r} for r in leases]
        )
    else:
        reserve_gpus(rows, host, plan)
    if plan is not None and plan.multi_host:
        ray_nodes(rows[0], plan, host)
    for row in rows:
        key = row.engine_api_key()
        row.api_key_hash = hashlib.sha256(key.encode()).hexdigest()
        row.save(update_fields=["api_key_hash"])
        which = f" (replica {row.replica_index} of {count})" if count > 1 else ""
        row.events.create(
            new_status=Status.PENDING, reason=f"created by {user.get_username()}{which}"
        )
    first = rows[0]
    audit_record(
        actor=user,
        action="deployment.create",
        target_type="deployment",
        target_id=first.pk,
        request=http_request,
        detail={
            "name": name,
            "model": source.ref,
            "engine": engine,
            "host": host.name,
            "hosts": [h.name for h in spanned_hosts(plan, host)] if plan else [host.name],
            "multi_host": bool(plan and plan.multi_host),
            "team": team.name if (team := options.get("team")) else None,
            "replicas": count,
            "replicas_asked": options["overrides"].get("replicas", 1),
            "gpus": list(snapshot.gpu_indices),
            "replica_gpus": [[g.index for g in r] for r in snapshot.gpus[:count]],
            "replica_ids": [row.pk for row in rows],
            "reserved_bytes": [g.total_bytes for g in snapshot.per_gpu],
            "planned_command": list(first.planned_argv),
            "tensor_parallel_size": snapshot.engine_args.tensor_parallel_size,
            "pipeline_parallel_size": snapshot.engine_args.pipeline_parallel_size,
            "auto_restart": options["auto_restart"],
            "sleep_after_s": options["sleep_after_s"],
            "scaling_policy": options["scaling_policy"] is not None,
            "hub_token": "the launcher's own" if options["hub_token"] else "none given",
        },
    )
    launch_policy.create(first, options["scaling_policy"], user=user, http_request=http_request)
    for row in rows:
        transaction.on_commit(partial(_enqueue, "deployments.launch", row, [row, first]))
    return first


def _create_rows(
    user: Any,
    name: str,
    host: Host,
    source: ModelSource | GgufSource,
    engine: str,
    snapshot: PlanSnapshot,
    options: dict[str, Any],
    count: int,
) -> list[Deployment]:
    """The first replica's row, then one per further replica pointing at it; each row's plan
    snapshot names its own GPUs."""
    rows: list[Deployment] = []
    for index in range(1, count + 1):
        own = snapshot.with_gpus(snapshot.gpus[index - 1 : index])
        rows.append(
            Deployment.objects.create(
                name=name,
                model_id=source.engine_model,
                revision=source.revision,
                engine=engine,
                host=host,
                plan=own.to_json(),
                spans_hosts=own.engine_args.spans_hosts,
                auto_restart=options["auto_restart"],
                sleep_after_s=options.get("sleep_after_s"),
                hub_token_sealed=sealed.seal(options["hub_token"] or ""),
                created_by=user,
                team=options.get("team"),
                replica_of=rows[0] if rows else None,
                replica_index=index,
            )
        )
    return rows


@transaction.atomic
def deployment_stop(
    *, user: Any, deployment: Deployment, http_request: HttpRequest | None = None
) -> Deployment:
    """Stop every replica still up (one audit row for them all); returns the first replica.

    A replica already `stopping` gets its stop task sent again: pressing Stop again is how a
    user gets a stop whose message was lost (Redis down) moving without waiting for the
    sweeper; the stop task is a no-op once the row has ended."""
    require_role(user, Role.OPERATOR)
    rows = list(deployment.group().select_for_update().order_by("pk"))
    first = rows[0]
    if problem := membership.act_problem(user, first.team_id, first.name, "stopping"):
        raise DeploymentError(problem)
    return stop_rows(rows, actor=user, http_request=http_request)


def stop_rows(
    rows: list[Deployment],
    *,
    actor: Any,
    http_request: HttpRequest | None = None,
    why: str = "",
) -> Deployment:
    """Every live replica of `rows` (one deployment's, locked) to `stopping`, one audit row;
    `actor` None is Shardboard itself (a quota), `why` then says why."""
    first = rows[0]
    by = actor.get_username() if actor is not None else why
    live = [r for r in rows if r.status not in (Status.STOPPED, Status.FAILED)]
    if not live:
        state = replicas.overall([r.status for r in rows])
        raise DeploymentError(f"{first.name} is already {state.label.lower()}.")
    again = [r.pk for r in live if r.status == Status.STOPPING]
    for row in live:
        if row.status != Status.STOPPING:
            row.transition(Status.STOPPING, reason=f"stop requested by {by}")
    audit_record(
        actor=actor,
        action="deployment.stop",
        target_type="deployment",
        target_id=first.pk,
        request=http_request,
        detail={
            "name": first.name,
            "host": first.host.name,
            "replicas": len(live),
            "replica_ids": [r.pk for r in live],
            "sent_again": again,
            **({"reason": why} if why else {}),
        },
    )
    # Out of the gateway's rotation at once, before the host worker gets the stop and drains.
    transaction.on_commit(partial(drain.drain_begin, [r.pk for r in live]))
    for row in live:
        transaction.on_commit(partial(_enqueue, "deployments.stop", row, [row, first]))
    return first
