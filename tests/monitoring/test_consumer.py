"""GpuConsumer over the real Redis channel layer: refusals, backfill contents, live samples."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from controlpanel.asgi import application
from deployments.models import Deployment
from monitoring.history import MINUTE_MS
from monitoring.host import worker
from tests.support.monitoring import (
    ORIGIN,
    fill_history,
    registered,
    ws_connect,
    ws_headers,
    ws_next_of,
)

pytestmark = pytest.mark.django_db(transaction=True)
GIB_MIB = 1024


async def test_anonymous_is_refused() -> None:
    comm = WebsocketCommunicator(application, "/ws/gpus/", headers=[ORIGIN])
    assert await comm.connect(timeout=5) == (False, 4401)


async def test_user_without_role_is_refused(outsider) -> None:
    comm = WebsocketCommunicator(application, "/ws/gpus/", headers=await ws_headers(outsider))
    assert await comm.connect(timeout=5) == (False, 4403)


async def test_unknown_window_is_refused(viewer) -> None:
    comm = WebsocketCommunicator(
        application, "/ws/gpus/?window=3y", headers=await ws_headers(viewer)
    )
    assert await comm.connect(timeout=5) == (False, 4400)


def _deployment_on(host_row: Any, user: Any, pgid: int) -> Deployment:
    return Deployment.objects.create(
        name="llama-tp2",
        model_id="meta/llama",
        engine="vllm",
        host=host_row,
        status="running",
        pid=pgid,
        pgid=pgid,
        created_by=user,
    )


async def test_backfill_then_live_samples_with_attribution(
    viewer, host_name, sim4, engine_process
) -> None:
    host_row = await sync_to_async(registered)(host_name, sim4)
    await sync_to_async(_deployment_on)(host_row, viewer, engine_process.pid)
    sim4.attach(engine_process.pid, [0, 1], 20 * GIB_MIB * 1024 * 1024, 90.0, name="vllm")
    agent = worker.HostAgent(host_name, sim4, worker.history_writer())
    await sync_to_async(agent.beat)()  # loads the deployment pgids from the database
    assert agent.pgid_owners == {engine_process.pid: "llama-tp2"}
    samples = await sync_to_async(fill_history)(host_name, sim4, seconds=8)
    for sample in samples[-2:]:
        await sync_to_async(agent.publish)(sample)  # stores the attribution map too

    comm = await ws_connect(viewer, f"?window=5m&host={host_name}")
    backfill = await ws_next_of(comm, "backfill", host_name)
    assert backfill["w"] == "5m"
    [host] = backfill["hosts"]
    assert host["h"] == host_name and host["sim"] is True and host["online"] is True
    assert [d["i"] for d in host["devices"]] == [0, 1, 2, 3]
    assert host["devices"][0]["mt"] == 81559
    assert host["t"] == [s.ts_ms for s in samples]
    gpu0 = host["g"]["0"]
    assert len(gpu0["u"]) == 8 and all(u >= 80 for u in gpu0["u"])
    assert host["g"]["2"]["u"] == [0] * 8
    assert gpu0["dm"]["llama-tp2"] == [20 * GIB_MIB] * 8
    assert gpu0["mo"] == [m - 20 * GIB_MIB for m in gpu0["m"]]
    assert host["own"] == {str(engine_process.pid): "llama-tp2"}
    assert [r["index"] for r in host["rows"]] == [0, 1, 2, 3]
    assert host["rows"][0]["simulated"] is True and "MiB / 81559MiB" in host["rows"][0]["memory"]

    live = sim4.sample()
    await sync_to_async(agent.sink())(live)  # history and channel layer, as the sampler does
    message = await ws_next_of(comm, "sample", host_name)
    assert message["t"] == live.ts_ms and message["sim"] is True
    assert message["g"][1]["dm"] == {"llama-tp2": 20 * GIB_MIB}
    assert message["g"][3]["dm"] == {} and message["g"][3]["mo"] == 512
    assert len(message["rows"]) == 4

    await comm.send_json_to({"type": "window", "window": "1h"})
    again = await ws_next_of(comm, "backfill", host_name)
    assert again["w"] == "1h" and again["hosts"][0]["t"] == [s.ts_ms for s in samples] + [
        live.ts_ms
    ]
    await comm.send_json_to({"type": "window", "window": "2d"})
    assert (await comm.receive_json_from(timeout=5))["type"] == "error"
    await comm.disconnect()


async def test_all_hosts_group_and_minute_window(viewer, host_name, sim4) -> None:
    await sync_to_async(registered)(host_name, sim4)
    comm = await ws_connect(viewer, "?window=24h")
    backfill = await ws_next_of(comm, "backfill", host_name)
    [host] = [h for h in backfill["hosts"] if h["h"] == host_name]
    assert host["res_s"] == 60 and host["t"] == []
    await sync_to_async(worker.publish)(host_name, sim4.sample(), sim4, {})
    message = await ws_next_of(comm, "sample", host_name)
    assert [g["i"] for g in message["g"]] == [0, 1, 2, 3]
    await comm.disconnect()


def _minute_of_history(host: str, backend: Any, agent: worker.HostAgent) -> int:
    """Six samples in the previous minute and one after it, so that the minute is aggregated."""
    minute_ms = time.time_ns() // 1_000_000 // MINUTE_MS * MINUTE_MS - MINUTE_MS
    store = worker.history_writer()
    for k in range(6):
        sample = dataclasses.replace(backend.sample(), ts_ms=minute_ms + k * 10_000)
        if k == 0:
            agent.publish(sample)  # stores the attribution map the aggregation reads
        store.append(host, sample)
    store.append(host, dataclasses.replace(backend.sample(), ts_ms=minute_ms + MINUTE_MS))
    return minute_ms


async def test_day_backfill_keeps_the_memory_split(viewer, host_name, sim4, engine_process) -> None:
    host_row = await sync_to_async(registered)(host_name, sim4)
    await sync_to_async(_deployment_on)(host_row, viewer, engine_process.pid)
    sim4.attach(engine_process.pid, [0, 1], 20 * GIB_MIB * 1024 * 1024, 90.0, name="vllm")
    agent = worker.HostAgent(host_name, sim4, worker.history_writer())
    await sync_to_async(agent.beat)()
    minute_ms = await sync_to_async(_minute_of_history)(host_name, sim4, agent)

    comm = await ws_connect(viewer, f"?window=24h&host={host_name}")
    [host] = (await ws_next_of(comm, "backfill", host_name))["hosts"]
    assert host["res_s"] == 60 and host["t"] == [minute_ms]
    for index in ("0", "1"):
        series = host["g"][index]
        assert series["dm"] == {"llama-tp2": [20 * GIB_MIB]}
        assert abs(series["mo"][0] + 20 * GIB_MIB - series["m"][0]) <= 1
    assert host["g"]["2"]["dm"] == {} and host["g"]["2"]["mo"] == host["g"]["2"]["m"]
    await comm.send_json_to({"type": "window", "window": "7d"})
    week = (await ws_next_of(comm, "backfill", host_name))["hosts"][0]
    assert week["w"] == "7d" and week["g"]["1"]["dm"] == {"llama-tp2": [20 * GIB_MIB]}
    await comm.disconnect()
