"""Playground fixtures: a stand-in engine, deployment rows, a gateway server, callers."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controlpanel import redisconn
from deployments.live import drain
from deployments.models import Deployment
from monitoring.models import Host
from playground.gateway import balance
from tests.support.gateway import GATEWAY_MAX_CONCURRENT, GATEWAY_MAX_TOKENS, RealEngine
from tests.support.stub_upstream import StubUpstream


@pytest.fixture
def stub() -> Iterator[StubUpstream]:
    upstream = StubUpstream().start()
    yield upstream
    if upstream.hold_after_first is not None:
        upstream.hold_after_first.set()
    upstream.stop()


@pytest.fixture
def make_deployment(transactional_db: None, operator: Any) -> Callable[..., Deployment]:
    host = Host.objects.create(
        name="pg-host", queue="host.pg-host", backend="simulated", simulated=True
    )

    def make(
        name: str, port: int, *, engine: str = "transformers", status: str = "running"
    ) -> Deployment:
        d = Deployment.objects.create(
            name=name,
            model_id="/models/tiny",
            engine=engine,
            host=host,
            status=status,
            bind_host="127.0.0.1",
            port=port,
            created_by=operator,
        )
        # Ids start again with each test's database, Redis does not: a drain mark or a down
        # mark an earlier test left under this id (they last up to a minute) would keep this
        # replica out of the gateway's rotation. A real engine clears them when it runs.
        drain.drain_end([d.pk])
        redisconn.client(connect_timeout_s=1).delete(balance.down_key(d.pk))
        return d

    return make


@pytest.fixture
def gateway_settings(settings: Any) -> Any:
    """Set before the server forks: the server process reads them at start."""
    settings.PLAYGROUND_MAX_TOKENS = GATEWAY_MAX_TOKENS
    settings.PLAYGROUND_MAX_CONCURRENT = GATEWAY_MAX_CONCURRENT
    settings.AUDIT_PROMPTS = False
    settings.PLAYGROUND_CONNECT_TIMEOUT_S = 2.0
    return settings


@pytest.fixture
def server(gateway_settings: Any, asgi_server: Any) -> Any:
    return asgi_server


# --- a real engine: transformers serve on the tiny demo model, as the engine tests run it -----


@pytest.fixture(scope="session")
def tiny_engine(
    tiny_model: Path, hf_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealEngine]:
    """The engine the deployment tests launch, spawned by hand: it is not a deployment, and
    without the deployment marker host workers of other test runs on this machine do not
    take it for an orphan of theirs and stop it (deployments.worker.reconcile)."""
    from deployments.engines import LaunchSpec, get_adapter
    from deployments.engines.base import MARKER_ENV
    from deployments.host import supervisor as sv
    from deployments.host.probes import wait_ready

    root = tmp_path_factory.mktemp("playground-engine")
    spec = LaunchSpec(
        deployment_id="playground-test",
        model=str(tiny_model),
        port=sv.find_free_port(),
        device="cpu",
        extra_env=(("HF_HOME", str(hf_home)),),
    )
    command = get_adapter("transformers").build(spec)
    env = {**os.environ, **{k: v for k, v in command.env.items() if k != MARKER_ENV}}
    log_path = root / "engine.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command.argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        ready = wait_ready(
            command.base_url, command.probe, 60.0, lambda: proc.poll() is None, poll_s=0.2
        )
        assert ready.ready, f"{ready}\n{sv.tail(log_path)}"
        yield RealEngine(spec.port, proc)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
