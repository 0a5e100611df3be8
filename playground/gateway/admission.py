"""Admission to the gateway: who calls, what they ask, which engine answers.

On the hot path (a bearer token and a running deployment seen in the last
PLAYGROUND_AUTH_CACHE_S) this touches neither the database nor a thread.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from functools import partial

from django.conf import settings
from django.db.models import Model
from django.http import HttpRequest

from controlpanel.audit import client_ip
from playground import tokens
from playground.gateway import dbwork, protocols, ratelimit, response_routes, rows, wake
from playground.gateway.access import (
    AccessError,
    Caller,
    auth_cache_s,
    authenticate_async,
    bearer_credential,
)
from playground.gateway.balance import ROTATION_S
from playground.gateway.cache import TtlCache
from playground.gateway.errors import body_too_large_message
from playground.gateway.payload import (
    GatewayCall,
    Kind,
    LengthCap,
    PayloadError,
    cap_length,
    parse_call,
)
from playground.gateway.rows import Outcome
from playground.gateway.targets import gateway_replicas
from playground.gateway.upstream import Target

PLAYGROUND_HEADER = "X-Shardboard-Playground"
_PLAYGROUND_META = "HTTP_X_SHARDBOARD_PLAYGROUND"  # the header, as request.META names it

# deployment name → its running replicas' engines. Every operator may use every running
# deployment (gateway.targets.deployments_usable), so the caller is not part of the key. Kept
# at most ROTATION_S: a replica the watchdog marked down leaves the rotation that fast.
targets: TtlCache[str, tuple[Target, ...]] = TtlCache(ttl_s=lambda: min(auth_cache_s(), ROTATION_S))


@dataclass(slots=True)
class Exchange:
    """One gateway request on its way through."""

    caller: Caller
    call: GatewayCall
    target: Target  # the replica answering (the first until the balancer chose)
    length: LengthCap | None  # None: the path generates nothing (embeddings, count_tokens)
    from_playground: bool
    ip: str | None
    started_s: float
    replicas: tuple[Target, ...] = ()
    bearer_id: str = ""  # the API token's (ratelimit.bearer_id); empty for a session


async def admit(request: HttpRequest, kind: Kind, started_s: float) -> Exchange:
    """The admitted request; raises AccessError (refusals after authentication are audited)."""
    caller = await authenticate_async(request)
    try:
        call, length = capped_call(request_body(request), kind)
        if caller.models is not None and call.model not in caller.models:
            raise AccessError(
                403,
                "model_not_allowed",
                f"{call.model!r} is not among the models this caller may use: "
                + (", ".join(sorted(caller.models)) or "none"),
            )
        replicas = await replicas_for(caller, call.model)
        unserved = protocols.unserved(kind, replicas[0].engine)
        if unserved is not None:
            raise AccessError(400, "unsupported_endpoint", f"{call.model!r}: {unserved}")
        if call.protocol.keeps_responses:  # a continuation goes where its history is kept
            replicas = await response_routes.pinned(
                user_id=caller.user.pk, body=call.body, replicas=replicas
            )
    except AccessError as exc:
        refusal = dbwork.submit(_audit_refusal, caller, exc, client_ip(request), urgent=True)
        await dbwork.wait(refusal)
        raise
    from_playground = request.META.get(_PLAYGROUND_META) == "1"
    ip = client_ip(request)
    credential = bearer_credential(request) if caller.via == "token" else None
    bearer = ratelimit.bearer_id(tokens.token_hash(credential)) if credential else ""
    return Exchange(
        caller, call, replicas[0], length, from_playground, ip, started_s, replicas, bearer
    )


def request_body(request: HttpRequest) -> bytes:
    """The body, at most PLAYGROUND_MAX_BODY_BYTES. The gateway's handler has already refused a
    larger one before reading it (playground.gateway.asgi); read(), not .body, because .body
    applies the site's smaller DATA_UPLOAD_MAX_MEMORY_SIZE to the declared length."""
    limit = settings.PLAYGROUND_MAX_BODY_BYTES
    raw = request.read(limit + 1)
    if len(raw) > limit:
        raise AccessError(413, "request_too_large", body_too_large_message(limit))
    return raw


def capped_call(raw: bytes, kind: Kind) -> tuple[GatewayCall, LengthCap | None]:
    try:
        call = parse_call(raw, kind, max_choices=settings.PLAYGROUND_MAX_CHOICES)
        body, length = cap_length(call, settings.PLAYGROUND_MAX_TOKENS)
    except PayloadError as exc:
        raise AccessError(400, "invalid_request_error", str(exc)) from exc
    return GatewayCall(call.kind, call.model, call.stream, call.wants_usage, body), length


async def replicas_for(caller: Caller, name: str) -> tuple[Target, ...]:
    lookup = partial(gateway_replicas, user=caller.user, name=name)

    def load() -> Awaitable[tuple[Target, ...]]:
        return dbwork.in_thread(lookup)

    try:
        found = await targets.get_or_load(name, load)
    except AccessError as exc:  # none running: held while a sleeping one wakes (gateway.wake)
        found = await wake.held(exc.parent or name, exc, load)
    wake.touch(found[0].name)  # an adapter's requests keep its deployment awake
    return found


def _audit_refusal(caller: Caller, exc: AccessError, ip: str | None) -> list[Model]:
    row = rows.gateway_audit_row(
        user=caller.user,
        via=caller.via,
        call=None,
        deployment=None,
        outcome=Outcome(exc.kind, exc.status, error=exc.message),
        ip=ip,
    )
    return [row]
