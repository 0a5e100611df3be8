"""The monitoring side of the host worker: register, heartbeat, sample and publish.

Imported only by host code (``controlpanel.host.worker`` for the ``hostworker`` command), so
these Celery signal handlers run in that process alone. ``current_backend()`` is the GPU backend this host uses; the
deployment code calls ``attach``/``detach`` on it for simulated engines.

Live samples are encoded once and published on the host's and the all-hosts Redis pub/sub
streams (``monitoring.live``); each ASGI process fans them out to its websockets. A
registration publishes ``{"type": "host", "h": name}`` on the same streams, so open
dashboards add a new host without a reload.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import redis
from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.utils.module_loading import import_string
from redis.typing import EncodableT, FieldT

from controlpanel import redisconn
from controlpanel.celery import host_queue
from monitoring import live, selectors
from monitoring.gpus import GpuBackend, HostSample, get_backend
from monitoring.gpus.cpu import CpuDevice, WithCpu
from monitoring.history import owners_key
from monitoring.host import registration
from monitoring.host.history_writer import HistoryWriter
from monitoring.host.sampler import Sampler, Sink, fan_out
from monitoring.payloads import live_message

log = logging.getLogger(__name__)

_lock = threading.Lock()
_backend: GpuBackend | None = None
_agent: HostAgent | None = None


def host_name() -> str:
    return str(settings.SHARDBOARD_HOST_NAME)


def heartbeat_interval_s() -> float:
    return max(0.2, float(os.environ.get("HEARTBEAT_INTERVAL_S", "5")))


def select_backend(host: str) -> GpuBackend:
    state_dir = settings.VAR_DIR / "simgpus" / host
    return get_backend(
        settings.GPU_BACKEND, simulated_spec=settings.SIMULATED_GPUS, state_dir=state_dir
    )


def current_backend() -> GpuBackend:
    """This process's GPU backend, built on first use (the same object the sampler reads)."""
    global _backend
    with _lock:
        if _backend is None:
            _backend = select_backend(host_name())
        return _backend


def backend_note(backend: GpuBackend) -> str:
    if not backend.simulated:
        return "NVML"
    reason = "GPU_BACKEND=simulated" if settings.GPU_BACKEND == "simulated" else "no NVIDIA driver"
    return f"simulated GPUs {settings.SIMULATED_GPUS} ({reason})"


def register(host: str, backend: GpuBackend) -> None:
    """``backend`` is the worker's devices: its GPU backend, with its CPU (``WithCpu``)."""
    info: dict[str, Any] = {"pid": os.getpid(), "interval_s": settings.SAMPLE_INTERVAL_S}
    if isinstance(backend, WithCpu):
        info["cpu"] = backend.cpu.facts.as_info()
    registration.host_register(
        name=host,
        queue=host_queue(host),
        address=socket.gethostname(),
        backend="simulated" if backend.simulated else "nvml",
        simulated=backend.simulated,
        backend_note=backend_note(backend),
        devices=backend.devices(),
        topology=backend.topology(),
        info=info,
    )
    gpus = sum(1 for d in backend.devices() if d.kind == "gpu")
    log.info("host %s registered with %d GPU(s)%s", host, gpus, " and its CPU" * ("cpu" in info))
    announce(host)


def announce(host: str) -> None:
    """Tell open dashboards that this host (re)registered; they fetch its inventory."""
    text = json.dumps({"type": "host", "h": host}, separators=(",", ":"))
    try:
        live.publish(selectors.redis_client(), host, text)
    except redis.RedisError as exc:  # pages pick the host up with their next backfill
        log.warning("host %s: could not announce the registration (%s)", host, exc)


def with_cpu(backend: GpuBackend, host: str, pgids: Callable[[], Any]) -> GpuBackend:
    """The GPU backend plus this host's CPU as a device, unless SHARDBOARD_CPU_DEVICE is off."""
    if not settings.SHARDBOARD_CPU_DEVICE:
        return backend
    return WithCpu(backend, CpuDevice(host, pgids))


@dataclass
class HostAgent:
    """The heartbeat thread (which also refreshes deployment pgids) and the sampler; ``backend``
    is every device this host offers (its GPUs and, with ``with_cpu``, its CPU)."""

    host: str
    backend: GpuBackend
    history: HistoryWriter
    pgid_owners: dict[int, str] = field(default_factory=dict)
    registered: bool = False
    stop_event: threading.Event = field(default_factory=threading.Event)
    sampler: Sampler | None = None
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.beat()
        self.thread = threading.Thread(target=self.run_heartbeat, name="heartbeat", daemon=True)
        self.thread.start()
        self.sampler = Sampler(self.backend, self.sink(), interval_s=settings.SAMPLE_INTERVAL_S)
        self.sampler.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self.sampler is not None:
            self.sampler.stop()
        if self.thread is not None:
            self.thread.join(5)
        try:
            registration.host_mark_offline(name=self.host)
        except DatabaseError:
            log.exception("host %s: could not mark offline on shutdown", self.host)

    def run_heartbeat(self) -> None:
        while not self.stop_event.wait(heartbeat_interval_s()):
            self.beat()

    def beat(self) -> None:
        """One heartbeat; a database or Redis failure is logged and retried next time."""
        close_old_connections()
        try:
            if not self.registered or not registration.host_heartbeat(name=self.host):
                register(self.host, self.backend)
                self.registered = True
            self.pgid_owners = engine_pgids()(self.host)
        except DatabaseError:
            log.exception("host %s: heartbeat failed; retrying", self.host)

    def sink(self) -> Sink:
        return fan_out(self.append_history, self.publish)

    def append_history(self, sample: HostSample) -> None:
        self.history.append(self.host, sample)

    def publish(self, sample: HostSample) -> None:
        own = selectors.process_owners(sample, self.pgid_owners)
        if own:
            store_owners(self.history.client, self.host, own)
        publish(self.host, sample, self.backend, own)


def store_owners(client: redis.Redis, host: str, own: dict[str, str]) -> None:
    key = owners_key(host)
    pipe = client.pipeline(transaction=False)
    fields: dict[FieldT, EncodableT] = dict(own.items())  # hset's Mapping key is invariant
    pipe.hset(key, mapping=fields)
    pipe.expire(key, selectors.OWNERS_TTL_S)
    pipe.execute()


def publish(host: str, sample: HostSample, backend: GpuBackend, own: dict[str, str]) -> None:
    """Send one sample to the host's stream and the all-hosts stream."""
    message = selectors.publish_message(
        live_message(host, sample, simulated=backend.simulated),
        sample,
        backend.devices(),
        own,
        simulated=backend.simulated,
    )
    # Encoded once here, not once per browser: the ASGI processes forward this text as it is.
    live.publish(selectors.redis_client(), host, json.dumps(message, separators=(",", ":")))


def history_writer() -> HistoryWriter:
    """The host's history writer, on a client of its own."""
    client = redisconn.client(connect_timeout_s=2, timeout_s=5)
    return HistoryWriter(client, interval_s=settings.SAMPLE_INTERVAL_S)


def start_agent() -> HostAgent:
    global _agent
    host = host_name()
    agent = HostAgent(host, current_backend(), history_writer())
    agent.backend = with_cpu(agent.backend, host, lambda: agent.pgid_owners.keys())
    agent.start()
    _agent = agent
    return agent


@worker_ready.connect
def on_worker_ready(**_: Any) -> None:
    agent = start_agent()
    log.info(
        "monitoring started for host %s (every %.1f s)", agent.host, settings.SAMPLE_INTERVAL_S
    )


@worker_shutdown.connect
def on_worker_shutdown(**_: Any) -> None:
    global _agent
    if _agent is not None:
        _agent.stop()
        _agent = None
    if _backend is not None:
        _backend.close()


@cache
def engine_pgids() -> Callable[[str], dict[int, str]]:
    """``host -> {pgid: deployment name}`` of the engines that may hold GPU memory there.

    Named by a dotted path in settings (SHARDBOARD_ENGINE_PGIDS), so that monitoring, which
    attributes memory to deployments, never imports the deployments app.
    """
    lookup: Callable[[str], dict[int, str]] = import_string(settings.SHARDBOARD_ENGINE_PGIDS)
    return lookup
