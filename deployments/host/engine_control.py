"""Host-worker side of a deployment: spawn, wait for ready, watch, stop, release. No pages."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from django.conf import settings

from controlpanel.audit import audit_record
from deployments.engines import UnsupportedSpec
from deployments.host import (
    diagnosis,
    launchphases,
    logship,
    prepare,
    restart_policy,
    transitions,
    turns,
)
from deployments.host import supervisor as sv
from deployments.host.adapters import before_rotation
from deployments.host.dbretry import retried
from deployments.host.downloads import fetching
from deployments.host.engine_handles import Adopted, EngineProcess, Spawned
from deployments.host.engine_spec import hub_token, is_local
from deployments.host.engine_spec import launch_spec as launch_spec
from deployments.host.enginebins import adapter_for
from deployments.host.owner import engine_owner
from deployments.host.probes import smoke_test, wait_ready
from deployments.host.ray import cluster
from deployments.live import drain
from deployments.models import Deployment, Status

log = logging.getLogger(__name__)


def log_dir() -> Path:
    path = Path(settings.VAR_DIR) / "engine-logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


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
    if settings.SHARDBOARD_FETCH_WEIGHTS and not is_local(d):
        token = hub_token(d)
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
    if refused := prepare.wait_for_engine(d, recorder):
        recorder.close()
        if _still(d, Status(d.status)):
            transitions.fail(d, refused)
        return {"failed": refused}
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
        command = adapter_for(d.engine).build(spec)
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
    return _await_ready(d, command, Spawned(handle))


def resume_starting(deployment_id: int) -> dict[str, Any]:
    """Probe the readiness of a `starting` engine nobody is waiting on (its task died, or
    the worker restarted and adopted it), then promote it like a launch does."""
    d = retried(
        lambda: Deployment.objects.select_related("host", "created_by").get(pk=deployment_id)
    )
    if d.status != Status.STARTING or not d.pid or not d.port:
        return {"skipped": f"status is {d.status}"}
    engine = Adopted(d)
    if not engine.alive():
        return {"skipped": "the engine is gone; the watchdog handles it"}
    command = adapter_for(d.engine).build(launch_spec(d, d.port))
    return _await_ready(d, command, engine)


def _attach_simulated(d: Deployment) -> None:
    backend = transitions.backend() if d.host.simulated else None
    if backend is None or not hasattr(backend, "attach"):
        return
    leases = d.leases.on_gpus().filter(active=True, gpu__host=d.host)
    # no CPU row there; retried: it runs in `starting`, where a dropped connection must not
    # end the launch task (tests/faults)
    shares = retried(lambda: dict(leases.values_list("gpu__index", "memory_bytes")))
    if not shares:
        return  # a plan on the CPU device holds no simulated GPU
    try:
        backend.attach(
            d.pid, list(shares), max(shares.values(), default=0), name=d.name, memory_by_gpu=shares
        )
    except Exception as exc:
        log.warning("could not show deployment %s on the simulated GPUs: %s", d.pk, exc)


def _await_ready(d: Deployment, command: Any, engine: EngineProcess) -> dict[str, Any]:
    # An adopted engine has been loading since it was spawned: the timeout counts from then.
    started = d.process_started_at if isinstance(engine, Adopted) else None
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
    before_rotation(d, command.base_url)  # its LoRA adapters, before any request
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


def _failed_start(d: Deployment, engine: EngineProcess, reason: str) -> dict[str, Any]:
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
    reason = stop_engine(d)
    transitions.move(d, Status.STOPPED, reason, release_leases=True, restart_at=None)
    return {"stopped": d.pk}


def stop_engine(d: Deployment) -> str:
    """Drain, SIGTERM (then SIGKILL) and ship the log of `d`'s engine; says how it went. The
    caller moves the row on (stopped, or scaled to zero: deployments.host.idle)."""
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
    return _stop_reason(result, drained)


def _stop_reason(result: sv.StopResult | None, drained: drain.Drained | None) -> str:
    if result is None or not result.was_running:
        return "stopped (no engine process was running)"
    stopped = f"engine stopped with {result.signal_sent} in {result.duration_s:.1f} s"
    return f"{drained.describe()}; {stopped}" if drained else stopped
