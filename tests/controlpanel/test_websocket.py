"""A websocket round trip through the real Redis channel layer."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings

from controlpanel.asgi import application
from controlpanel.consumers import user_group

pytestmark = pytest.mark.django_db(transaction=True)


def test_layer_is_redis() -> None:
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels_redis.core.RedisChannelLayer"


async def _session_cookie(user) -> str:
    from django.test import Client

    client = Client()
    await sync_to_async(client.force_login)(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


async def test_round_trip_for_signed_in_user(viewer) -> None:
    cookie = await _session_cookie(viewer)
    headers = [(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://127.0.0.1")]
    comm = WebsocketCommunicator(application, "/ws/events/", headers=headers)
    connected, _ = await comm.connect(timeout=5)
    assert connected
    assert (await comm.receive_json_from(timeout=5))["type"] == "hello"
    await comm.send_json_to({"type": "ping", "echo": 42})
    assert await comm.receive_json_from(timeout=5) == {"type": "pong", "echo": 42}
    layer = get_channel_layer()
    await layer.group_send(
        user_group(viewer.pk), {"type": "event.push", "event": {"type": "x", "n": 1}}
    )
    assert await comm.receive_json_from(timeout=5) == {"type": "x", "n": 1}
    await comm.disconnect()


@pytest.mark.parametrize(
    ("route", "group", "kind", "key"),
    [
        ("/ws/engines/", "engines", "engine.prep", "payload"),
        ("/ws/deployments/", "deployments", "deployment.status", "payload"),
        ("/ws/benchmarks/7/", "benchmark.7", "benchmark.progress", "payload"),
        ("/ws/events/", "user.{pk}", "event.push", "event"),
    ],
)
async def test_a_push_sent_once_the_socket_is_open_arrives(
    operator, monkeypatch, route: str, group: str, kind: str, key: str
) -> None:
    """Pages read the state again when their socket opens (engines.js, deployments.js): a push
    sent after that must reach them, so the socket is in its group before the accept. A slow
    group join (a loaded Redis) used to open the socket first, and the push was lost."""
    layer = get_channel_layer()
    join = layer.group_add

    async def slow_join(name: str, channel: str) -> None:
        await asyncio.sleep(0.5)
        await join(name, channel)

    monkeypatch.setattr(layer, "group_add", slow_join)
    cookie = await _session_cookie(operator)
    headers = [(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://127.0.0.1")]
    comm = WebsocketCommunicator(application, route, headers=headers)
    connected, _ = await comm.connect(timeout=10)
    assert connected
    await layer.group_send(group.format(pk=operator.pk), {"type": kind, key: {"pushed": route}})
    received = await comm.receive_json_from(timeout=5)
    if received.get("type") == "hello":  # /ws/events/ greets first
        received = await comm.receive_json_from(timeout=5)
    assert received == {"pushed": route}
    await comm.disconnect()


async def test_anonymous_is_refused() -> None:
    comm = WebsocketCommunicator(
        application, "/ws/events/", headers=[(b"origin", b"http://127.0.0.1")]
    )
    connected, code = await comm.connect(timeout=5)
    assert not connected
    assert code == 4401


async def test_foreign_origin_is_refused(viewer) -> None:
    cookie = await _session_cookie(viewer)
    headers = [(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://evil.example")]
    comm = WebsocketCommunicator(application, "/ws/events/", headers=headers)
    connected, _ = await comm.connect(timeout=5)
    assert not connected


async def test_idle_socket_outlives_the_layers_blocking_pop(viewer) -> None:
    """channels_redis waits for messages with BZPOPMIN for 5 s; redis-py 8's default 5 s socket
    timeout used to end that read first, killing every idle consumer with a traceback."""
    cookie = await _session_cookie(viewer)
    headers = [(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://127.0.0.1")]
    comm = WebsocketCommunicator(application, "/ws/events/", headers=headers)
    connected, _ = await comm.connect(timeout=5)
    assert connected
    assert (await comm.receive_json_from(timeout=5))["type"] == "hello"
    layer = get_channel_layer()
    assert await comm.receive_nothing(timeout=layer.brpop_timeout + 2.5)  # idle, and alive
    await layer.group_send(
        user_group(viewer.pk), {"type": "event.push", "event": {"type": "late", "n": 2}}
    )
    assert await comm.receive_json_from(timeout=5) == {"type": "late", "n": 2}
    await comm.disconnect()


async def test_a_demoted_users_open_socket_is_closed(operator) -> None:
    cookie = await _session_cookie(operator)
    headers = [(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://127.0.0.1")]
    comm = WebsocketCommunicator(application, "/ws/events/", headers=headers)
    assert (await comm.connect(timeout=5))[0]
    assert (await comm.receive_json_from(timeout=5))["type"] == "hello"

    # A change that keeps the role: the socket stays open and keeps receiving.
    operator.first_name = "Otto"
    await sync_to_async(operator.save)()
    await comm.send_json_to({"type": "ping", "echo": 1})
    assert await comm.receive_json_from(timeout=5) == {"type": "pong", "echo": 1}

    # Demoted (no role left, as an admin would in the admin site): closed at once, 4403.
    await sync_to_async(operator.groups.clear)()
    closed = await comm.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4403}


async def test_a_deactivated_users_open_socket_is_closed(viewer) -> None:
    cookie = await _session_cookie(viewer)
    headers = [(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://127.0.0.1")]
    comm = WebsocketCommunicator(application, "/ws/gpus/", headers=headers)
    assert (await comm.connect(timeout=5))[0]
    viewer.is_active = False
    await sync_to_async(viewer.save)()
    while (out := await comm.receive_output(timeout=5))["type"] != "websocket.close":
        pass  # live GPU samples may come first
    assert out["code"] == 4403
