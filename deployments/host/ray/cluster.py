"""A deployment's own Ray cluster across its hosts: the lead's worker starts the head and
asks the others' workers to join; each worker stops its own node. Runs in host workers.

Order on the way down: the engine first (its caller stopped it), then every node; the lead
stops its head and sends `deployments.ray_leave` to each other host, whose worker stops its
node (and, should that message be lost, its watchdog does once it sees the deployment ended).
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db.models import Q

from controlpanel.celery import app as celery_app
from controlpanel.celery import host_queue
from deployments.handoff import sealed
from deployments.host import supervisor as sv
from deployments.host.downloads import fetching
from deployments.host.owner import engine_owner
from deployments.host.ray import commands
from deployments.models import (
    TERMINAL,
    Deployment,
    DownloadStatus,
    ModelDownload,
    RayNode,
    Status,
)

log = logging.getLogger(__name__)
NODE_STOP_GRACE_S = 10.0
_PORTS_LOCK = threading.Lock()  # one block per node, even with launches on two threads
State = RayNode.State


class ClusterError(Exception):
    """The cluster could not form; the message says where and why."""


def ray_bin() -> str:
    return commands.ray_executable(settings.SHARDBOARD_RAY_BIN, settings.SHARDBOARD_VLLM_BIN)


def head_address(d: Deployment) -> str | None:
    head = d.ray_nodes.filter(role=RayNode.Role.HEAD).exclude(port=None).first()
    return head.gcs_address if head else None


def log_dir() -> Path:
    path = Path(settings.VAR_DIR) / "engine-logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _busy_port(address: str, ports: range) -> str | None:
    """The first of ``ports`` this host cannot bind on ``address`` and why; None: all free."""
    for port in ports:
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as sock:
            # as Ray's servers bind: a closed connection's port in TIME_WAIT is free to them
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((address, port))
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:
                    raise ClusterError(
                        f"{address} is not an address of host {settings.SHARDBOARD_HOST_NAME}: "
                        "set SHARDBOARD_RAY_NODE_ADDRESS to this host's IP on the cluster network"
                    ) from None
                return f"port {port}: {exc.strerror}"
    return None


def _free_block(node: RayNode, address: str) -> int:
    taken = set(
        RayNode.objects.filter(host=node.host, state__in=[State.PENDING, State.RUNNING])
        .exclude(pk=node.pk)
        .exclude(port=None)
        .values_list("port", flat=True)
    )
    try:
        blocks = commands.port_blocks(settings.SHARDBOARD_RAY_PORTS)
    except commands.PortRangeError as exc:
        raise ClusterError(str(exc)) from None
    busy = "every block is held by another deployment's node"
    for base in blocks:
        if base in taken:
            continue
        problem = _busy_port(address, range(base, base + commands.SERVICE_PORTS))
        if problem is None:
            return base
        busy = problem
    raise ClusterError(
        f"No free block of {commands.PORT_BLOCK} Ray ports on {node.host.name} in "
        f"SHARDBOARD_RAY_PORTS={settings.SHARDBOARD_RAY_PORTS} (last: {busy}): widen the range"
    )


def start_node(node: RayNode, head: str | None, *, fetched_weights: bool = False) -> bool:
    """Spawn this host's node (the head when ``head`` is None); False when the row was no
    longer pending (stopped meanwhile). Raises ClusterError or OSError when it cannot start.
    With `fetched_weights`, vLLM's workers on this node read the weights offline from this
    host's Hub cache."""
    address = settings.SHARDBOARD_RAY_NODE_ADDRESS
    with _PORTS_LOCK:
        base = _free_block(node, address)
        spec = commands.NodeSpec(
            deployment_id=str(node.deployment_id),
            host_name=node.host.name,
            address=address,
            base_port=base,
            num_gpus=node.num_gpus,
            gpu_indices=tuple(int(i) for i in node.gpu_indices),
            head_address=head,
            owner=engine_owner(),
            hub_cache=str(fetching.cache_dir()),
            hf_offline=fetched_weights,
        )
        log_path = log_dir() / f"deployment-{node.deployment_id}-ray-{node.role}.log"
        handle = sv.spawn(commands.node_argv(ray_bin(), spec), commands.node_env(spec), log_path)
        started = RayNode.objects.filter(pk=node.pk, state=State.PENDING).update(
            state=State.RUNNING,
            address=address,
            port=base,
            pid=handle.pid,
            pgid=handle.pgid,
            process_started_at=handle.create_time,
            log_path=str(log_path),
        )
    if not started:
        sv.stop(handle, NODE_STOP_GRACE_S)
        return False
    node.refresh_from_db()
    return True


def _last_line(node: RayNode) -> str:
    lines = [ln for ln in sv.tail(Path(node.log_path), 40).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    return (errors or lines or ["(no output)"])[-1].strip()[:300]


def _wait_gcs(node: RayNode, deadline: float) -> None:
    while time.monotonic() < deadline:
        if node.pid is None or not sv.is_alive(node.pid, node.process_started_at):
            raise ClusterError(f"The Ray head on {node.host.name} exited: {_last_line(node)}")
        if _answers(node):
            return
        time.sleep(0.2)
    raise ClusterError(f"The Ray head on {node.host.name} did not answer on port {node.port}")


def fetch_ahead(d: Deployment, token: str | None) -> str:
    """Pin the commit every host loads and have each other host fetch it now, alongside this
    one, rather than after it (its join then waits for the head). Returns the commit; ""
    when it cannot be pinned: this host's own download then says why."""
    commit = fetching.commit_for(d, token)
    if commit:
        for node in d.ray_nodes.filter(role=RayNode.Role.WORKER, state=State.PENDING):
            send("deployments.ray_join", node, commit=commit)
    return commit


def form_cluster(d: Deployment, commit: str = "", *, joins_sent: bool = False) -> None:
    """Start the head here, have every other host join, wait until each has its node up.
    With `commit` (the Hub weights the lead fetched), each other host fetches that commit
    into its own Hub cache before its node joins; `joins_sent`: `fetch_ahead` asked them."""
    deadline = time.monotonic() + settings.SHARDBOARD_RAY_JOIN_TIMEOUT_S
    nodes = list(d.ray_nodes.select_related("host"))
    head = next((n for n in nodes if n.role == RayNode.Role.HEAD), None)
    if head is None:
        raise ClusterError("This deployment spans hosts but has no Ray head node recorded.")
    if head.state == State.PENDING:
        try:
            if not start_node(head, None, fetched_weights=bool(commit)):
                raise ClusterError("The Ray head was stopped before it started.")
        except OSError as exc:
            raise ClusterError(f"Could not start `ray` on {head.host.name}: {exc}") from exc
    elif head.state != State.RUNNING:
        raise ClusterError(f"The Ray head on {head.host.name} is {head.state}.")
    _wait_gcs(head, deadline)
    workers = [n for n in nodes if n.role == RayNode.Role.WORKER]
    for node in workers:
        if node.state == State.PENDING and not joins_sent:
            send("deployments.ray_join", node, commit=commit)
    _wait_joined(workers, deadline)


def _wait_joined(workers: list[RayNode], deadline: float) -> None:
    """Until every node runs; a host still fetching the weights keeps its node waited for as
    long as its download moves (a 140 GB model takes longer than any fixed timeout)."""
    pks = [n.pk for n in workers]
    timeout = settings.SHARDBOARD_RAY_JOIN_TIMEOUT_S
    moved: dict[int, int] = {}
    while True:
        rows = list(RayNode.objects.filter(pk__in=pks).select_related("host"))
        for node in rows:
            if node.state in (State.EXITED, State.STOPPED):
                raise ClusterError(node.reason or f"The Ray node on {node.host.name} ended.")
        if all(n.state == State.RUNNING for n in rows):
            return
        waiting = [n.host_id for n in rows if n.state == State.PENDING]
        if _downloads_moved(workers[0].deployment_id, waiting, moved):
            deadline = max(deadline, time.monotonic() + timeout)
        if time.monotonic() >= deadline:
            late = ", ".join(n.host.name for n in rows if n.state != State.RUNNING)
            raise ClusterError(
                f"No Ray node started on {late} within {timeout:g} s: is its host worker running?"
            )
        time.sleep(0.25)


def _downloads_moved(deployment_id: int, host_ids: list[int], seen: dict[int, int]) -> bool:
    """Whether a download of the deployment's weights on one of these hosts got further
    since the last look."""
    if not host_ids:
        return False
    live = ModelDownload.objects.filter(
        deployment_id=deployment_id,
        host_id__in=host_ids,
        status=DownloadStatus.DOWNLOADING,
    ).values_list("pk", "bytes_done")
    moved = False
    for pk, done in live:
        if seen.get(pk, -1) != done:
            moved = True
        seen[pk] = done
    return moved


def send(task: str, node: RayNode, **kwargs: str) -> None:
    try:
        queue = host_queue(node.host.name)
        celery_app.send_task(task, args=[node.pk], kwargs=kwargs, queue=queue, retry=True)
    except Exception as exc:  # kombu raises several kinds; the watchdogs clean up either way
        log.warning("could not send %s for ray node %s: %s", task, node.pk, exc)


def join(node_pk: int, commit: str = "") -> dict[str, str]:
    """On a worker host: fetch the weights at `commit` (if any) into this host's Hub cache,
    then start its node and join the deployment's head, once the head answers."""
    node = RayNode.objects.select_related("deployment", "host").get(pk=node_pk)
    if node.host.name != settings.SHARDBOARD_HOST_NAME or node.state != State.PENDING:
        return {"skipped": f"node is {node.state} on {node.host.name}"}
    d = node.deployment
    if d.status not in (Status.PENDING, Status.STARTING):
        mark(node, State.STOPPED, f"deployment is {d.status}")
        return {"skipped": f"deployment is {d.status}"}
    if commit:
        token = sealed.unseal(d.hub_token_sealed, deployment_id=d.pk) or settings.HF_TOKEN
        fetched = fetching.for_node(d, node.host, commit, token or None)
        if fetched.ended:
            if not Deployment.objects.filter(pk=d.pk, status=Status.PENDING).exists():
                mark(node, State.STOPPED, fetched.ended)  # stopped meanwhile: not a failure
                return {"skipped": fetched.ended}
            mark(node, State.EXITED, f"The weights could not be fetched: {fetched.ended}")
            return {"failed": fetched.ended}
    head, why, ended = _await_head(d)
    if head is None:
        mark(node, State.STOPPED if ended else State.EXITED, why)
        return {"skipped" if ended else "failed": why}
    try:
        started = start_node(node, head, fetched_weights=bool(commit))
    except (ClusterError, OSError) as exc:
        mark(node, State.EXITED, f"The Ray node on {node.host.name} could not start: {exc}")
        return {"failed": str(exc)}
    return {"joined" if started else "skipped": head}


def _await_head(d: Deployment) -> tuple[str | None, str, bool]:
    """The head's GCS address once it answers, or None, why, and whether the deployment
    ended meanwhile. A join sent ahead of the lead's own download (`fetch_ahead`) waits here
    for as long as that download moves."""
    timeout = settings.SHARDBOARD_RAY_JOIN_TIMEOUT_S
    deadline = time.monotonic() + timeout
    moved: dict[int, int] = {}
    while True:
        status = Deployment.objects.filter(pk=d.pk).values_list("status", flat=True).first()
        if status not in (Status.PENDING, Status.STARTING):
            return None, f"deployment is {status}", True
        head = d.ray_nodes.filter(role=RayNode.Role.HEAD, state=State.RUNNING).first()
        if head is not None and head.port is not None and _answers(head):
            return head.gcs_address, "", False
        if _downloads_moved(d.pk, [d.host_id], moved):
            deadline = max(deadline, time.monotonic() + timeout)
        if time.monotonic() >= deadline:
            return (
                None,
                f"The Ray head of the deployment did not answer within {timeout:g} s.",
                False,
            )
        time.sleep(0.25)


def _answers(head: RayNode) -> bool:
    try:
        with socket.create_connection((head.address, head.port or 0), timeout=1):
            return True
    except OSError:
        return False


def mark(node: RayNode, state: str, reason: str) -> None:
    RayNode.objects.filter(pk=node.pk).exclude(state__in=[State.STOPPED]).update(
        state=state, reason=reason
    )


def stop_local(node: RayNode) -> None:
    """Stop this host's node (its process group, then any process Ray started with its
    marker in another group); an exited node keeps its state and reason."""
    owner, marker = engine_owner(), commands.node_marker(node.deployment_id)
    if node.pgid:
        sv.stop(node.pgid, NODE_STOP_GRACE_S, owner=owner, deployment_id=marker)
    for found in sv.find_engines(owner):
        if found.deployment_id == marker:
            sv.stop(found.pgid, NODE_STOP_GRACE_S, owner=owner, deployment_id=marker)
    sv.reap_children()
    RayNode.objects.filter(pk=node.pk).filter(
        Q(state=State.PENDING) | Q(state=State.RUNNING)
    ).update(state=State.STOPPED)


def leave(node_pk: int) -> dict[str, str]:
    node = RayNode.objects.select_related("host").get(pk=node_pk)
    if node.host.name != settings.SHARDBOARD_HOST_NAME:
        return {"skipped": f"node is on {node.host.name}"}
    stop_local(node)
    return {"stopped": str(node.pk)}


def teardown(deployment_id: int) -> None:
    """After the deployment ended (its engine already stopped): every node down."""
    d = Deployment.objects.get(pk=deployment_id)
    if d.status not in TERMINAL:
        return
    me = settings.SHARDBOARD_HOST_NAME
    for node in d.ray_nodes.select_related("host").exclude(state=State.STOPPED):
        if node.host.name == me:
            stop_local(node)
        else:
            send("deployments.ray_leave", node)
