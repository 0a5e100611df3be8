"""A launch over several hosts: which hosts a plan spans, and the Ray node each one runs.

The planner places the stages (pipeline parallel across hosts when no host holds the model);
the launch's one transaction writes a Ray node row per host beside the leases, the head on
the host of the first stage, which runs the engine (deployments.host.ray).
"""

from __future__ import annotations

from deployments.engines import platforms
from deployments.handoff.snapshot import PlanSnapshot
from deployments.lifecycle.errors import DeploymentError
from deployments.models import Deployment, RayNode
from monitoring.models import Host


def check_hosts(first: str, hosts: tuple[str, ...], replicas: int | None) -> None:
    if not hosts:
        return
    if first in hosts or len(set(hosts)) != len(hosts):
        raise DeploymentError("Name each further host once, and not the first host again.")
    if replicas != 1:
        raise DeploymentError("A launch over several hosts runs one replica; ask for 1.")


def cpu_ray_refusal(snapshot: PlanSnapshot, host: Host) -> str | None:
    """Refused before a lease or a Ray node exists, rather than by vLLM once the cluster has
    formed (engines.platforms.ray_refusal)."""
    hosts = spanned_hosts(snapshot, host)
    return platforms.ray_refusal(
        hosts=len(hosts),
        device=snapshot.engine_args.device,
        any_simulated=any(h.simulated for h in hosts),
    )


def spanned_hosts(plan: PlanSnapshot, host: Host) -> list[Host]:
    """The hosts of the first replica, in rank order: the first runs the engine."""
    names = list(dict.fromkeys(ref.host or host.name for ref in plan.gpus[0])) if plan.gpus else []
    found = {h.name: h for h in Host.objects.filter(name__in=names)}
    return [found[n] for n in names if n in found] or [host]


def ray_nodes(row: Deployment, plan: PlanSnapshot, lead: Host) -> None:
    """One Ray node per host the replica spans: the head with the engine, workers elsewhere.
    No automatic restart: a restarted engine would need the whole cluster formed again."""
    Deployment.objects.filter(pk=row.pk).update(auto_restart=False)
    row.auto_restart = False
    by_host: dict[str, list[int]] = {}
    for ref in plan.gpus[0]:
        by_host.setdefault(ref.host or lead.name, []).append(ref.index)
    for host in spanned_hosts(plan, lead):
        indices = by_host[host.name]
        RayNode.objects.create(
            deployment=row,
            host=host,
            role=RayNode.Role.HEAD if host == lead else RayNode.Role.WORKER,
            num_gpus=len(indices),
            gpu_indices=indices,
        )


def further_hosts(first: Deployment) -> tuple[str, ...]:
    """The hosts a launch spanned beside its own, for launching it again."""
    workers = first.ray_nodes.filter(role=RayNode.Role.WORKER).order_by("pk")
    return tuple(workers.values_list("host__name", flat=True))
