"""Watching a deployment's Ray nodes, from every host worker, every second.

Each worker checks the nodes it runs: one whose `ray start` ended is marked exited with the
reason, one whose deployment ended (a `ray_leave` lost) is stopped. The lead's worker fails
a deployment, engine first, once one of its nodes exited or a worker host went offline.
"""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings

from deployments.host import diagnosis, logship, transitions
from deployments.host import supervisor as sv
from deployments.host.owner import engine_owner
from deployments.host.ray import cluster, commands
from deployments.models import TERMINAL, Deployment, RayNode, Status

log = logging.getLogger(__name__)
State = RayNode.State


def _exit_text(node: RayNode) -> str:
    info = sv.child_exit(node.pid) if node.pid else None
    how = diagnosis.exit_text(info.exit_code, info.signal) if info else "exit status unknown"
    if node.pid:
        sv.forget_child(node.pid)
    return how


def check_local() -> None:
    me = settings.SHARDBOARD_HOST_NAME
    for node in RayNode.objects.filter(host__name=me, state=State.RUNNING).select_related(
        "deployment", "host"
    ):
        if node.deployment.status in TERMINAL:
            cluster.stop_local(node)  # its ray_leave was lost
        elif not node.pid or not sv.is_alive(node.pid, node.process_started_at):
            reason = f"The Ray node on {me} exited ({_exit_text(node)})"
            cluster.mark(node, State.EXITED, reason)
            cluster.stop_local(node)  # what Ray left behind in other groups
            log.warning("%s (deployment %s)", reason, node.deployment_id)


def problem(d: Deployment) -> str | None:
    """Why the cluster of ``d`` is broken, or None."""
    stale_s = settings.HEARTBEAT_STALE_S
    for node in d.ray_nodes.select_related("host"):
        if node.state == State.EXITED:
            return node.reason or f"The Ray node on {node.host.name} exited"
        if node.state == State.STOPPED:
            return f"The Ray node on {node.host.name} was stopped"
        if node.role == RayNode.Role.WORKER and not node.host.is_online():
            return (
                f"Host {node.host.name} stopped answering (no heartbeat for {stale_s:g} s): "
                "its Ray node is lost"
            )
    return None


def check_lead() -> None:
    rows = Deployment.objects.filter(
        host__name=settings.SHARDBOARD_HOST_NAME,
        status__in=[Status.STARTING, Status.RUNNING],
        spans_hosts=True,
    ).select_related("host")
    for d in rows:
        reason = problem(d)
        if reason is not None:
            fail(d, reason)


def fail(d: Deployment, reason: str) -> None:
    """Engine first, then the deployment fails (its leases freed, every node stopped)."""
    if d.pgid:
        sv.stop(d.pgid, 5, owner=engine_owner(), deployment_id=str(d.pk))
        sv.reap_children()
    logship.finish(d, Path(d.log_path) if d.log_path else None)
    transitions.fail(d, f"{reason}; the deployment spans hosts and cannot run without it.")


def check() -> None:
    check_local()
    check_lead()


def stop_all_nodes() -> int:
    """A worker stopping with its engines stops its Ray nodes too; the lead of each fails
    its deployment with this reason."""
    me = settings.SHARDBOARD_HOST_NAME
    nodes = list(RayNode.objects.filter(host__name=me, state=State.RUNNING).select_related("host"))
    for node in nodes:
        reason = f"The Ray node on {me} was stopped with its host worker"
        cluster.mark(node, State.EXITED, reason)
        cluster.stop_local(node)
    return len(nodes)


def reconcile(found: dict[str, sv.FoundEngine], owner: str) -> dict[str, int]:
    """After a worker restart: keep the nodes still live and wanted, mark the vanished ones
    exited (the lead fails their deployment), stop marked nodes nobody wants."""
    counts = {"ray_nodes_adopted": 0, "ray_nodes_exited": 0, "ray_nodes_stopped": 0}
    me = settings.SHARDBOARD_HOST_NAME
    for node in RayNode.objects.filter(host__name=me, state=State.RUNNING).select_related(
        "deployment", "host"
    ):
        found.pop(commands.node_marker(node.deployment_id), None)
        if node.deployment.status in TERMINAL:
            cluster.stop_local(node)
            counts["ray_nodes_stopped"] += 1
        elif node.pid and sv.is_alive(node.pid, node.process_started_at):
            counts["ray_nodes_adopted"] += 1
        else:
            reason = f"The Ray node on {me} was not running when its host worker started again"
            cluster.mark(node, State.EXITED, reason)
            counts["ray_nodes_exited"] += 1
    for marker, engine in found.items():
        if engine.owner == owner:
            sv.stop(engine.pgid, cluster.NODE_STOP_GRACE_S, owner=owner, deployment_id=marker)
            counts["ray_nodes_stopped"] += 1
    return counts
