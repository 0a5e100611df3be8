"""Host-worker side of a deployment: spawn, wait for ready, watch, stop, release. No pages."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from controlpanel.audit import audit_record
from deployments.catalog.sources import LOCAL_PREFIX
from deployments.engines import LaunchSpec, UnsupportedSpec, get_adapter
from deployments.engines.llamacpp_memory import visible_order
from deployments.handoff import sealed
from deployments.host import diagnosis, launchphases, logship, restart_policy, transitions, turns
from deployments.host import supervisor as sv
from deployments.host.dbretry import retried
from deployments.host.downloads import fetching
from deployments.host.owner import engine_owner
from deployments.host.probes import smoke_test, wait_ready
from deployments.host.ray import cluster
from deployments.live import drain
from deployments.models import Deployment, Engine, Status

log = logging.getLogger(__name__)


def log_dir() -> Path:
    path = Path(settings.VAR_DIR) / "engine-logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def launch_spec(d: Deployment, port: int, snapshot: Path | None = None) -> LaunchSpec:
    """The engine's settings: the plan's (`Deployment.snapshot`) plus this host's facts; with
    `snapshot` (weights this worker fetched), the engine loads that folder offline instead of
    reaching the Hub itself."""
    plan = d.snapshot
    leases = d.leases.filter(active=True, gpu__host=d.host).select_related("gpu")
    # CUDA0 is the first GPU CUDA_VISIBLE_DEVICES names: llama-server's -ts shares follow it.
    indices = visible_order(plan.gpu_indices, [lease.gpu.index for lease in leases])
    spans = d.spans_hosts
    # Over several hosts it is vLLM on Ray even on simulated GPUs (a test engine stands in).
    simulated = d.host.simulated and not spans
    model, revision, hub_env = _weights_ref(d, snapshot, spans)
    facts: dict[str, Any] = {
        "deployment_id": str(d.pk),
        "model": model,
        "port": port,
        "host": settings.SHARDBOARD_ENGINE_HOST,
        "revision": revision,
        "served_model_name": d.name,
        "api_key": d.engine_api_key() if get_adapter(d.engine).supports_api_key else None,
        "gpu_indices": () if simulated else indices,
        "spans_hosts": spans,
        "ray_address": cluster.head_address(d) if spans else None,
        "node_address": settings.SHARDBOARD_RAY_NODE_ADDRESS if spans else None,
        "device": "cpu" if simulated else "cuda",
        "hf_offline": snapshot is not None or _is_local(d),
        "hf_token": None if _is_local(d) or snapshot else _hub_token(d),  # offline: not needed
        "owner": engine_owner(),
        "extra_env": hub_env,
    }
    if simulated:
        facts |= {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}
    if d.engine == Engine.LLAMACPP:
        facts |= _llamacpp(simulated)
    elif d.engine != Engine.VLLM:
        facts |= _beside_vllm(plan.request)
    return plan.launch_spec(**facts)


def _llamacpp(simulated: bool) -> dict[str, Any]:
    """llama-server takes the plan's -c, -np and its own placement; vLLM's knobs mean
    nothing to it. On a simulated host it runs on the CPU, so no GPU placement applies."""
    facts: dict[str, Any] = {
        "gpu_memory_utilization": None,
        "max_num_batched_tokens": None,
        "dtype": None,
        "quantization": None,
        "kv_cache_dtype": None,
        "decode_context_parallel_size": None,
        "block_size": None,
        "enforce_eager": False,
    }
    if simulated:
        facts |= {"n_gpu_layers": None, "split_mode": None, "tensor_split": (), "main_gpu": None}
    return facts


def _beside_vllm(request: Mapping[str, Any]) -> dict[str, Any]:
    """An engine other than vLLM gets only the settings the user asked for: the planner's
    figures are vLLM's (transformers serve names what it ignores in its warnings)."""
    return {
        "gpu_memory_utilization": request.get("gpu_memory_utilization"),
        "max_model_len": None,
        "max_num_seqs": request.get("max_num_seqs"),
        "max_num_batched_tokens": None,
        "quantization": None,
        "decode_context_parallel_size": None,
        "block_size": None,
        "enforce_eager": False,
    }


def _weights_ref(
    d: Deployment, snapshot: Path | None, spans_hosts: bool
) -> tuple[str, str | None, tuple[tuple[str, str], ...]]:
    """The model argument, its revision, and the Hub environment of the engine.

    Over several hosts the snapshot path is the lead's alone: vLLM hands the model argument
    as given to its workers on every node (ModelConfig in the VllmConfig each RayWorkerProc
    gets), so there it is the repo id pinned to the fetched commit, found offline in each
    node's own cache (each node's HF_HUB_CACHE: raynodes.commands.node_env)."""
    if snapshot is None:
        return d.model_id, d.revision or None, ()
    if spans_hosts:
        return d.model_id, snapshot.name, (("HF_HUB_CACHE", str(fetching.cache_dir())),)
    return str(snapshot), None, ()


def _is_local(d: Deployment) -> bool:
    return d.snapshot.model_ref.startswith(LOCAL_PREFIX) or d.model_id.startswith("/")


def _hub_token(d: Deployment) -> str | None:
    """The launcher's own token, else this host's HF_TOKEN setting (gated or private repos)."""
    return sealed.unseal(d.hub_token_sealed, deployment_id=d.pk) or settings.HF_TOKEN or None


def launch(deployment_id: int) -> dict[str, Any]:
    d = Deployment.objects.select_related("host", "created_by").get(pk=deployment_id)
    if d.status != Status.PENDING:
        return {"skipped": f"status is {d.status}"}
    return _start(d, "", "")


def restart(deployment_id: int, attempt: int) -> dict[str, Any]:
    """One automatic restart; a duplicate, late or superseded delivery is a no-op."""
    d = Deployment.objects.select_related("host", "created_by").get(pk=deployment_id)
    if d.status != Status.RESTARTING or d.restart_count != attempt:
        return {"skipped": f"status is {d.status}, restart {d.restart_count}"}
    limit = settings.SHARDBOARD_RESTART_MAX_ATTEMPTS
    return _start(d, f"restart {attempt} of {limit}: ", f"-restart-{attempt}", attempt=attempt)


def _start(d: Deployment, note: str, log_suffix: str, **audit_extra: Any) -> dict[str, Any]:
    """Spawn the engine on the leased GPUs, move to `starting`, wait until it is ready.

    Each restart logs to a file of its own, so the log of the engine that died is kept. A Hub
    model's weights are fetched first (no GPU is needed for that, so before the turn).
    """
    recorder = launchphases.open_for(d)
    snapshot = None
    joins_sent = False
    if settings.SHARDBOARD_FETCH_WEIGHTS and not _is_local(d):
        token = _hub_token(d)
        commit = cluster.fetch_ahead(d, token) if d.spans_hosts else ""
        joins_sent = bool(commit)
        fetched = fetching.for_launch(d, token, recorder, commit)
        if fetched.ended:
            recorder.close()
            if _still(d, Status(d.status)):
                transitions.fail(d, fetched.ended)
                return {"failed": fetched.ended}
            return {"skipped": fetched.ended}
        snapshot = fetched.snapshot
        recorder.end_step()
    if turns.wait_for_turn(d) and not _still(d, Status(d.status)):
        recorder.close()
        return {"skipped": "ended while waiting for its turn on a shared GPU"}
    if d.spans_hosts:
        try:
            cluster.form_cluster(d, snapshot.name if snapshot else "", joins_sent=joins_sent)
        except cluster.ClusterError as exc:
            transitions.fail(d, f"The Ray cluster did not form: {exc}")
            return {"failed": str(exc)}
        if not _still(d, Status(d.status)):
            return {"skipped": "stopped while its Ray cluster formed"}
    port = sv.find_free_port(settings.SHARDBOARD_ENGINE_HOST)
    try:
        spec = launch_spec(d, port, snapshot)
        command = get_adapter(d.engine).build(spec)
    except UnsupportedSpec as exc:
        transitions.fail(d, f"The engine refused the settings: {exc}")
        return {"failed": str(exc)}
    recorder.model_path = spec.model
    log_path = log_dir() / f"deployment-{d.pk}{log_suffix}.log"
    try:
        handle = sv.spawn(command.argv, command.env, log_path)
    except OSError as exc:
        found = diagnosis.diagnose_spawn_error(exc, command.argv[0])
        logship.finish(d, log_path)
        transitions.fail(d, found.reason, found)
        return {"failed": found.reason}
    audit_record(
        actor=d.created_by,
        action="deployment.spawn",
        target_type="deployment",
        target_id=d.pk,
        detail={
            "argv": list(command.masked_argv),
            "pid": handle.pid,
            "host": d.host.name,
            "port": port,
            **audit_extra,
        },
    )
    fields: dict[str, Any] = {
        "port": port,
        "bind_host": settings.SHARDBOARD_ENGINE_HOST,
        "pid": handle.pid,
        "pgid": handle.pgid,
        "process_started_at": handle.create_time,
        "log_path": str(log_path),
        "argv": list(command.masked_argv),
        "env": command.masked_env,
        "restart_at": None,
    }
    reason = f"{note}engine spawned (pid {handle.pid}) on port {port}"
    if not transitions.move(d, Status.STARTING, reason, **fields):
        sv.stop(handle, settings.SHARDBOARD_STOP_GRACE_S)  # stopped before it began
        return {"skipped": "stopped before start"}
    logship.follow(d, log_path, first=not log_suffix, on_lines=recorder.feed)
    _attach_simulated(d)
    return _await_ready(d, command, _Spawned(handle))


class _Spawned:
    """The engine this task spawned: its exit status is ours to read."""

    def __init__(self, handle: sv.EngineHandle) -> None:
        self.handle = handle
        self.pid = handle.pid
        self.log_path: Path | None = handle.log_path

    def alive(self) -> bool:
        return sv.handle_alive(self.handle)

    def end(self) -> tuple[int | None, int | None]:
        sv.stop(self.handle, 5)
        info = sv.poll_exit(self.handle)
        return (info.exit_code, info.signal) if info else (None, None)


class _Adopted:
    """An engine found again after a worker restart: only its pid and start time are known."""

    def __init__(self, d: Deployment) -> None:
        self.d = d
        self.pid = d.pid
        self.log_path = Path(d.log_path) if d.log_path else None

    def alive(self) -> bool:
        pid = self.d.pid
        return pid is not None and sv.is_alive(pid, self.d.process_started_at)

    def end(self) -> tuple[int | None, int | None]:
        if self.d.pgid:
            sv.stop(self.d.pgid, 5, owner=engine_owner(), deployment_id=str(self.d.pk))
        return None, None


def resume_starting(deployment_id: int) -> dict[str, Any]:
    """Probe the readiness of a `starting` engine nobody is waiting on (its task died, or
    the worker restarted and adopted it), then promote it like a launch does."""
    d = retried(
        lambda: Deployment.objects.select_related("host", "created_by").get(pk=deployment_id)
    )
    if d.status != Status.STARTING or not d.pid or not d.port:
        return {"skipped": f"status is {d.status}"}
    engine = _Adopted(d)
    if not engine.alive():
        return {"skipped": "the engine is gone; the watchdog handles it"}
    command = get_adapter(d.engine).build(launch_spec(d, d.port))
    return _await_ready(d, command, engine)


def _attach_simulated(d: Deployment) -> None:
    backend = transitions.backend() if d.host.simulated else None
    if backend is None or not hasattr(backend, "attach"):
        return
    leases = list(d.leases.filter(active=True, gpu__host=d.host).select_related("gpu"))
    shares = {lease.gpu.index: lease.memory_bytes for lease in leases}
    try:
        backend.attach(
            d.pid, list(shares), max(shares.values(), default=0), name=d.name, memory_by_gpu=shares
        )
    except Exception as exc:
        log.warning("could not show deployment %s on the simulated GPUs: %s", d.pk, exc)


def _await_ready(d: Deployment, command: Any, engine: _Spawned | _Adopted) -> dict[str, Any]:
    # An adopted engine has been loading since it was spawned: the timeout counts from then.
    started = d.process_started_at if isinstance(engine, _Adopted) else None
    elapsed_before_s = max(0.0, time.time() - started) if started else 0.0
    result = wait_ready(
        command.base_url,
        command.probe,
        max(5.0, settings.SHARDBOARD_READY_TIMEOUT_S - elapsed_before_s),
        lambda: engine.alive() and _still(d, Status.STARTING),
    )
    retried(d.refresh_from_db)
    if d.status != Status.STARTING or d.pid != engine.pid:
        return {"ended": d.status}  # stopped, failed or restarting (watchdog) meanwhile
    if not result.ready:
        return _failed_start(d, engine, result.reason)
    smoke = smoke_test(
        command.base_url,
        command.request_model,
        d.engine_api_key() if command.supports_api_key else None,
        embeds=command.embeds,
    )
    if not smoke.ok:
        return _failed_start(d, engine, f"the engine answered the smoke test badly: {smoke.reason}")
    # The steps before the status: a page reloads on the status change and must find `ready`
    # recorded then (an event sent while it reloads never reaches it).
    if recorder := launchphases.current(d.pk):
        logship.catch_up(d.pk)  # the lines that led to ready are read before it is recorded
        recorder.ready()
    # A drain mark left under this id (a database whose ids started again, a drain whose stop
    # never came) must not keep a running engine out of the gateway's rotation.
    drain.drain_end([d.pk])
    retried(
        lambda: transitions.move(
            d,
            Status.RUNNING,
            f"ready in {result.elapsed_s:.1f} s; smoke test answered {smoke.text[:60]!r}",
        )
    )
    return {"running": d.pk, "ready_s": round(result.elapsed_s, 2)}


def _still(d: Deployment, status: Status) -> bool:
    """Whether the row still has ``status``; a dropped database connection is retried (a
    database restart during a launch must not kill the task and leave `starting`)."""
    return retried(lambda: Deployment.objects.filter(pk=d.pk, status=status).exists())


def _failed_start(d: Deployment, engine: _Spawned | _Adopted, reason: str) -> dict[str, Any]:
    if recorder := launchphases.current(d.pk):
        recorder.close()
    code, sig = engine.end()
    found = diagnosis.diagnose_exit(logship.finish(d, engine.log_path), code, sig)
    restart_policy.engine_lost(d, f"{reason}. {found.title}: {found.reason}", found)
    return {"failed": reason}


def stop(deployment_id: int) -> dict[str, Any]:
    d = Deployment.objects.select_related("host").get(pk=deployment_id)
    if d.status != Status.STOPPING:
        return {"skipped": f"status is {d.status}"}
    if recorder := launchphases.current(d.pk):
        recorder.close()
    result = None
    drained = None
    if d.pgid:
        # Out of the gateway's rotation and its streams finished (bounded) before SIGTERM:
        # a stop or scale-down cuts no answer the gateway admitted before it began.
        drained = drain.drain_replica(d.pk)
        result = sv.stop(
            d.pgid,
            settings.SHARDBOARD_STOP_GRACE_S,
            owner=engine_owner(),
            deployment_id=str(d.pk),
        )
        sv.reap_children()
    logship.finish(d, Path(d.log_path) if d.log_path else None)
    reason = _stop_reason(result, drained)
    transitions.move(d, Status.STOPPED, reason, release_leases=True, restart_at=None)
    return {"stopped": d.pk}


def _stop_reason(result: sv.StopResult | None, drained: drain.Drained | None) -> str:
    if result is None or not result.was_running:
        return "stopped (no engine process was running)"
    stopped = f"engine stopped with {result.signal_sent} in {result.duration_s:.1f} s"
    return f"{drained.describe()}; {stopped}" if drained else stopped
