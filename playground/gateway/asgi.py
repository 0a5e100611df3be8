"""The /v1/ gateway as its own lean Django ASGI handler, in front of the full one.

Django's middlewares are synchronous: through the full stack a gateway request hops between
threads again and again before its first byte. The gateway needs none of them: its views
authenticate themselves (token, or session + CSRF through Django's own session store,
`auth.get_user` and CSRF check: playground.gateway.access). This handler keeps the rest of
Django (URL resolution, the same views, exception handling) and adds what those middlewares
would have added to an API response: the allowed-hosts check and the security headers. It
also skips the request signals (see GatewayHandler.handle), resolves against the gateway's own
three patterns, and relays a stream with one await per chunk: each is work per request or per
chunk that an API relay does not need (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, cast

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response, response_for_exception
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.urls import ResolverMatch, get_resolver, set_script_prefix, set_urlconf
from django.utils.log import log_response

from controlpanel.bodylimit import declared_length
from playground.gateway import gate
from playground.gateway.errors import body_too_large, in_anthropic_shape

logger = logging.getLogger(__name__)
PREFIX = "/v1/"
ANTHROPIC_PREFIX = "/v1/messages"  # its refusals in Anthropic's error shape
URLCONF = "playground.gateway.urls"


class GatewayHandler(ASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        # The gateway's fixed paths and their (async) views, resolved once: Django's resolver
        # and the URLconf it sets (asgiref's Local, twice a request) are a large part of this
        # handler's own time per request.
        resolver = get_resolver(URLCONF)
        self._matches: dict[str, ResolverMatch] = {}
        for pattern in resolver.url_patterns:
            route = f"/{pattern.pattern}"
            if "<" in route:
                continue
            match = resolver.resolve(route)
            if iscoroutinefunction(match.func):  # called directly in _lean, with no arguments
                self._matches[route] = match

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        # No per-request ThreadSensitiveContext: it starts a thread for every request only to
        # run the request signals' receivers, which this handler does not send (see handle).
        await self.handle(scope, receive, send)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Django's ASGIHandler.handle, without the request_started/request_finished signals.

        Their receivers (close_old_connections, reset_queries, close_caches) tidy the request
        thread's database connections and caches; this event loop thread never has any (the
        gateway's database work runs in playground.gateway.dbwork's threads, which close their
        own), yet walking them costs CPU on every request (asgiref locals).
        """
        limit = settings.PLAYGROUND_MAX_BODY_BYTES
        if (declared_length(scope) or 0) > limit:
            await self._refuse(body_too_large(limit), send, scope)
            return
        prefix = get_script_prefix(scope)  # "" without a root path (uvicorn's default)
        if prefix not in ("", "/"):  # a task starts with "/"; setting it costs asgiref's Local
            set_script_prefix(prefix)
        body_file = gate.empty_body()  # filled below, once the caller may send a body
        created = self.create_request(scope, body_file)  # (request, None) or (None, an error)
        if created[0] is None:
            body_file.close()
            await self.send_response(created[1], send)
            _close_resources(created[1])
            return
        request = created[0]
        request.urlconf = URLCONF
        try:
            refusal = await self._before_body(request, scope, receive, body_file)
            if refusal is not None:
                await self._refuse(refusal, send, scope)
                return
            response = await self._respond_until_disconnect(request, receive, send)
        except RequestAborted:
            return
        finally:
            body_file.close()
        if response is not None:
            _close_resources(response)

    async def _before_body(
        self, request: HttpRequest, scope: dict[str, Any], receive: Any, body_file: Any
    ) -> HttpResponseBase | None:
        """A refusal (401, 403, 413) or None once the body (if any) is read into `body_file`.
        A request without a body is left to its view, which authenticates it."""
        if gate.sends_body(scope):
            try:
                refusal = await gate.refusal_before_body(request)
            except Exception as exc:  # the database is down, say: Django logs it, picks the status
                set_urlconf(URLCONF)
                return as_api_error(response_for_exception(request, exc))
            if refusal is not None:
                return refusal
        return await gate.read_body_into(receive, body_file, settings.PLAYGROUND_MAX_BODY_BYTES)

    async def _refuse(self, response: HttpResponseBase, send: Any, scope: dict[str, Any]) -> None:
        """Answer without the body: the server discards what the client still sends."""
        if scope["path"].removeprefix(scope.get("root_path", "")).startswith(ANTHROPIC_PREFIX):
            response = in_anthropic_shape(response)
        await self.send_response(_secured(response), send)
        _close_resources(response)

    async def _respond_until_disconnect(
        self, request: HttpRequest, receive: Any, send: Any
    ) -> HttpResponseBase | None:
        """The view's response, sent, or cut short when the client goes away (the view or the
        relay sees a cancellation; the relay closes the engine request); None when the client
        left before there was a response.

        The response is made in this task, not in a task of its own as Django does: one task
        and one loop turn fewer before every first byte. A listener task waits for the client's
        disconnect and then cancels this one."""
        task = cast("asyncio.Task[None]", asyncio.current_task())
        finished = False

        def stop_responding(_listener: asyncio.Task[None]) -> None:
            if not finished:
                task.cancel()

        listener = asyncio.create_task(self.listen_for_disconnect(receive))
        listener.add_done_callback(stop_responding)
        response = None
        try:
            response = await self.run_get_response(request)
            await self.send_response(response, send)
        except asyncio.CancelledError:
            if not (listener.done() and task.uncancel() == 0):
                raise  # cancelled from outside (the server is stopping), not by the listener
        finally:
            finished = True
            if not listener.done():
                listener.cancel()
        if listener.done() and not listener.cancelled():
            error = listener.exception()
            if error is not None and not isinstance(error, RequestAborted):
                raise error  # Django's AssertionError: a message that is not a disconnect
        return response

    async def send_response(self, response: HttpResponseBase, send: Any) -> None:
        """Django's, less a chunking pass per chunk of a stream (the relay's chunks are small;
        the ASGI server frames whatever size it is given), and for a RelayResponse less
        Django's wrapper generator too (it checks and converts each chunk: they are bytes)."""
        if not (isinstance(response, StreamingHttpResponse) and response.is_async):
            await super().send_response(response, send)
            return
        chunks = response.chunks if isinstance(response, RelayResponse) else None
        headers = [(k.encode("ascii"), v.encode("latin1")) for k, v in response.items()]
        for cookie in response.cookies.values():
            headers.append((b"Set-Cookie", cookie.output(header="").encode("ascii").strip()))
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        if chunks is None:  # is_async: Django's streaming_content is an async generator of bytes
            chunks = cast("AsyncGenerator[bytes, None]", response.streaming_content)
        async with aclosing(chunks) as content:
            async for chunk in content:
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body"})

    def load_middleware(self, is_async: bool = False) -> None:
        """No middleware: the chain is _lean alone (ASGIHandler.__init__ calls this)."""
        # A coroutine function stays one: convert_exception_to_response wraps it in another.
        self._chain = cast(
            "Callable[[HttpRequest], Awaitable[HttpResponseBase]]",
            convert_exception_to_response(self._lean),
        )

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        """Django's, less its set_urlconf(ROOT_URLCONF): a gateway request runs in a task of
        its own that starts with none set, and the URLconf is set where Django's resolver or
        its error views need it (in _lean)."""
        response = await self._chain(request)
        response._resource_closers.append(request.close)  # type: ignore[attr-defined]  # Django's, not in its stubs
        if response.status_code >= 400:
            await sync_to_async(log_response, thread_sensitive=False)(
                "%s: %s",
                response.reason_phrase,
                request.path,
                response=response,  # type: ignore[arg-type]  # any response; the stubs say HttpResponse
                request=request,
            )
        return response

    async def _lean(self, request: HttpRequest) -> HttpResponseBase:
        try:
            _check_host(request)  # DisallowedHost → 400, as CommonMiddleware would answer
            match = self._matches.get(request.path_info)
            if match is None:  # not a fixed view: resolved here, or Resolver404 (→ 404 below)
                set_urlconf(URLCONF)
                match = get_resolver(URLCONF).resolve(request.path_info)
            request.resolver_match = match
            response = await _call_view(match, request)
            self.check_response(response, match.func)  # as Django would: not None
        except Exception as exc:  # Django logs it and picks the status; the body is an API's
            set_urlconf(URLCONF)  # the gateway's error views
            response = as_api_error(response_for_exception(request, exc))
        return _secured(response)


async def _call_view(match: ResolverMatch, request: HttpRequest) -> HttpResponseBase:
    """The view called as Django's handler calls it, through public API only (a view that is
    not a coroutine function runs in Django's request thread, as Django runs it)."""
    view = match.func
    if not iscoroutinefunction(view):
        view = sync_to_async(view, thread_sensitive=True)
    return cast("HttpResponseBase", await view(request, *match.args, **match.kwargs))


def _secured(response: HttpResponseBase) -> HttpResponseBase:
    """The headers SecurityMiddleware would add to an API response."""
    response.setdefault("X-Content-Type-Options", "nosniff")
    response.setdefault("X-Frame-Options", settings.X_FRAME_OPTIONS)
    if settings.SECURE_REFERRER_POLICY:
        response.setdefault("Referrer-Policy", settings.SECURE_REFERRER_POLICY)
    return response


class RelayResponse(StreamingHttpResponse):
    """A stream of bytes from an async generator, which this handler sends chunk by chunk as
    they come (any other handler sends it as the StreamingHttpResponse it also is)."""

    def __init__(self, chunks: AsyncGenerator[bytes, None], **kwargs: Any) -> None:
        super().__init__(chunks, **kwargs)
        self.chunks = chunks


_VALID_HOSTS: set[tuple[str | None, str | None]] = set()
VALID_HOSTS_MAX = 256


def _check_host(request: HttpRequest) -> None:
    """request.get_host(), remembered per Host header once it passed: matching it against
    ALLOWED_HOSTS on every request is CPU the hot path does not need."""
    meta = request.META
    key = (meta.get("HTTP_X_FORWARDED_HOST"), meta.get("HTTP_HOST"))
    if key[1] is not None and key in _VALID_HOSTS:
        return
    request.get_host()
    if key[1] is not None:
        if len(_VALID_HOSTS) >= VALID_HOSTS_MAX:
            _VALID_HOSTS.clear()
        _VALID_HOSTS.add(key)


@receiver(setting_changed)
def _forget_valid_hosts(*, setting: str, **_kwargs: Any) -> None:
    if setting in {"ALLOWED_HOSTS", "DEBUG", "USE_X_FORWARDED_HOST"}:
        _VALID_HOSTS.clear()


def _close_resources(response: HttpResponseBase) -> None:
    """What response.close() does, less sending request_finished (see GatewayHandler.handle)."""
    closers: list[Callable[[], object]] = response._resource_closers  # type: ignore[attr-defined]  # Django's, not in its stubs
    for closer in closers:
        try:
            closer()
        except Exception:
            logger.exception("closing a gateway response's resource failed")
    closers.clear()


API_ERRORS = {400: "invalid_request_error", 403: "permission_error", 404: "not_found_error"}


def as_api_error(response: HttpResponseBase) -> HttpResponseBase:
    """An OpenAI-style JSON error instead of Django's HTML error page (no traceback, ever)."""
    if response.get("Content-Type", "").startswith("application/json"):
        return response
    status = response.status_code
    message = "Not found." if status == 404 else response.reason_phrase or "Error."
    if status >= 500:
        message = "Internal error in Shardboard's gateway; it is logged on the server."
    kind = API_ERRORS.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return JsonResponse({"error": {"message": message, "type": kind}}, status=status)


def with_gateway(django_app: Any) -> Any:
    """An ASGI app: /v1/… through the lean handler, everything else through `django_app`."""
    gateway_app = GatewayHandler()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        if scope["type"] == "http" and path.startswith(PREFIX):
            await gateway_app(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return app
