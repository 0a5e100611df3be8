"""The role matrix: every URL pattern the URLconf declares and every websocket route, asked by
anonymous, a user without a role, viewer, operator, admin and a revoked API token, on a real
server. Nobody below a route's role gets a 2xx (or a redirect other than to a login page) nor
changes anything, and nothing answers 500. A route missing from EXPECTED fails the test: a new
view is classified here, and a view without its check fails for someone."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from channels.testing import WebsocketCommunicator
from django.forms.models import model_to_dict
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RoutePattern
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlpanel.routing import websocket_urlpatterns
from deployments.models import Deployment
from monitoring.models import Gpu, Host
from playground import services as playground_services
from playground.models import PlaygroundRun
from tests.support.catalog import QWEN
from tests.support.gateway import session_for
from tests.support.hubstub import HubStub

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

RANK = {"anonymous": 0, "outsider": 0, "viewer": 1, "operator": 2, "admin": 3}
# The least role that may use each route; "public" anyone, "staff" Django's admin site (no
# persona here is staff), "metrics" only the METRICS_TOKEN (unset: refused to everyone).
EXPECTED: dict[str, str] = {
    "": "viewer",
    "audit/": "admin",
    "audit/export.<str:fmt>": "admin",
    "planner-accuracy/": "admin",
    "favicon.ico": "public",
    "hosts/<str:name>/retire/": "admin",
    "accounts/login/": "public",
    "accounts/logout/": "public",
    "gpus/topology/": "viewer",
    "metrics": "metrics",
    "models/": "viewer",
    "models/results/": "viewer",
    "models/token/": "viewer",
    "models/plan/": "viewer",
    "models/plan/gguf/": "viewer",
    "models/gguf/local/<int:root>/<path:path>/": "viewer",
    "models/gguf/<str:org>/<str:name>/": "viewer",
    "models/on-hosts/": "viewer",
    "models/on-hosts/prefetch/": "operator",
    "models/on-hosts/downloads/<int:pk>/cancel/": "operator",
    "models/on-hosts/<int:pk>/delete/": "operator",
    "models/local/<int:root>/": "viewer",
    "models/local/<int:root>/<path:path>/": "viewer",
    "models/<str:org>/<str:name>/": "viewer",
    "deployments/": "viewer",
    "deployments/new/": "operator",
    "deployments/<int:pk>/": "viewer",
    "deployments/<int:pk>/log/": "viewer",
    "deployments/<int:pk>/memory/": "viewer",
    "deployments/<int:pk>/stop/": "operator",
    "deployments/<int:pk>/relaunch/": "operator",
    "deployments/<int:pk>/scale/": "operator",
    "deployments/<int:pk>/idle/": "operator",
    "engines/state/": "viewer",
    "engines/<str:host>/<str:engine>/retry/": "operator",
    "deployments/<int:pk>/adapters/": "operator",
    "deployments/<int:pk>/adapters/<slug:name>/unload/": "operator",
    "deployments/<int:pk>/autoscale/": "viewer",
    "deployments/<int:pk>/autoscale/chart/": "viewer",
    "deployments/<int:pk>/autoscale/policy/": "operator",
    "playground/": "operator",
    "playground/runs.json": "operator",
    "playground/runs/<int:run_id>/browser/": "operator",
    "playground/tokens/": "operator",
    "playground/tokens/<int:token_id>/revoke/": "operator",
    "deployments/<int:pk>/benchmarks/": "viewer",  # starting a run (POST) checks Operator
    "deployments/<int:pk>/benchmarks/section/": "viewer",
    "benchmarks/compare/": "viewer",
    "benchmarks/<int:pk>/": "viewer",
    "benchmarks/<int:pk>/cancel/": "operator",
    "benchmarks/<int:pk>/export/": "viewer",
    "benchmarks/<int:pk>/progress/": "viewer",
    "tokens/": "viewer",
    "tokens/<int:token_id>/revoke/": "viewer",
    "tokens/<int:token_id>/limits/": "viewer",
    "tokens/<int:token_id>/models/": "viewer",
    "api/v1/": "viewer",
    "api/v1/openapi.json": "viewer",
    "api/v1/docs": "viewer",
    "api/v1/deployments": "viewer",  # creating one (POST) needs Operator and the deploy scope
    "api/v1/deployments/<int:pk>": "viewer",
    "api/v1/deployments/<int:pk>/stop": "operator",
    "api/v1/deployments/<int:pk>/scale": "operator",
    "api/v1/deployments/<int:pk>/idle": "operator",
    "api/v1/deployments/<int:pk>/adapters": "viewer",  # loading one (POST) needs Operator
    "api/v1/deployments/<int:pk>/adapters/<name>": "operator",
    "api/v1/deployments/<int:pk>/scaling-policy": "viewer",  # PUT and DELETE: Operator
    "api/v1/hosts": "viewer",
    "api/v1/gpus": "viewer",
    "api/v1/plan": "viewer",
    "api/v1/audit": "admin",
    "api/v1/usage": "viewer",
    "usage/": "operator",
    "v1/chat/completions": "operator",
    "v1/completions": "operator",
    "v1/models": "operator",
    "v1/responses": "operator",
    "v1/responses/<str:response_id>": "operator",
    "v1/responses/<str:response_id>/cancel": "operator",
    "v1/messages": "operator",
    "v1/messages/count_tokens": "operator",
    "v1/embeddings": "operator",
}
ADMIN_SITE_PUBLIC = {"admin/login/", "admin/logout/"}
EXPECTED_WS = {
    "ws/events/": "viewer",
    "ws/gpus/": "viewer",
    "ws/deployments/": "viewer",
    "ws/engines/": "viewer",
    "ws/deployments/<int:pk>/log/": "viewer",
    "ws/benchmarks/<int:pk>/": "viewer",
}
LOGIN_PAGES = ("/accounts/login/", "/admin/login/")
REGEX_FILL = {"app_label": "auth", "url": "no-such-page/"}


@dataclass(frozen=True)
class Route:
    route: str  # as declared, prefixes joined: "deployments/<int:pk>/stop/"
    name: str | None  # namespaced, for regex patterns that only reverse() can fill
    regex_groups: tuple[str, ...] = ()


def declared_routes(patterns: list[Any] | None = None, prefix: str = "", ns: str = "") -> Iterator[Route]:  # fmt: skip
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            inner_ns = f"{ns}{entry.namespace}:" if entry.namespace else ns
            yield from declared_routes(entry.url_patterns, prefix + str(entry.pattern), inner_ns)
        elif isinstance(entry, URLPattern):
            name = f"{ns}{entry.name}" if entry.name else None
            groups = () if isinstance(entry.pattern, RoutePattern) else tuple(entry.pattern.regex.groupindex)  # fmt: skip
            yield Route(prefix + str(entry.pattern), name, groups)


def required_role(route: str) -> str:
    if route.startswith("admin/"):
        return "public" if route in ADMIN_SITE_PUBLIC else "staff"
    return EXPECTED.get(route, "unclassified")


@dataclass
class World:
    """Real objects for the path parameters, and the callers."""

    fill: dict[str, Any]
    callers: dict[str, tuple[dict[str, str], dict[str, str]]] = field(default_factory=dict)
    watched: list[Any] = field(default_factory=list)

    def path(self, route: Route) -> str:
        if route.regex_groups:  # the admin site's app index and catch-all
            filled = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: REGEX_FILL[m[1]], route.route)
            return "/" + filled.replace("^", "").replace("$", "")
        special = {
            "models/<str:org>/<str:name>/": f"models/{QWEN}/",
            "models/gguf/<str:org>/<str:name>/": f"models/gguf/{QWEN}/",
            "audit/export.<str:fmt>": "audit/export.csv",
        }
        filled = special.get(route.route) or re.sub(
            r"<(?:\w+:)?(\w+)>", lambda m: str(self.fill[m[1]]), route.route
        )
        return "/" + filled

    def snapshot(self) -> list[dict[str, Any]]:
        return [model_to_dict(type(o).objects.get(pk=o.pk)) for o in self.watched]


@pytest.fixture
def hub(settings: Any) -> Iterator[HubStub]:
    """The Hub stand-in, as tests/deployments' fixture of the same name starts it."""
    from deployments.catalog.hubaccess import _shared_client
    from tests.support.catalog import LLAMA, TOKEN, clear_hub_cache

    stub = HubStub(tokens={TOKEN: {LLAMA}}).start()
    settings.HF_ENDPOINT, settings.HF_TOKEN = stub.url, ""
    clear_hub_cache()
    _shared_client.cache_clear()
    yield stub
    stub.stop()
    _shared_client.cache_clear()
    clear_hub_cache()


@pytest.fixture
def world(
    hub: HubStub, model_root: Any, viewer: Any, operator: Any, admin_user: Any, outsider: Any
) -> World:
    host = Host.objects.create(
        name="matrix-host",
        queue="host.matrix-host",
        backend="simulated",
        simulated=True,
        last_heartbeat=timezone.now(),
    )
    Gpu.objects.create(host=host, index=0, uuid="GPU-m-0", name="sim", memory_total_bytes=1 << 34)
    deployment = Deployment.objects.create(
        name="matrix",
        model_id="/models/tiny",
        engine="transformers",
        host=host,
        status="running",
        bind_host="127.0.0.1",
        port=9,
        created_by=operator,
    )
    run = PlaygroundRun.objects.create(
        user=operator, deployment_name="matrix", mode="chat", status="ok"
    )
    token, _ = playground_services.token_create(user=operator, name="kept")
    revoked, revoked_raw = playground_services.token_create(user=operator, name="revoked")
    assert playground_services.token_revoke(user=operator, token_id=revoked.pk)
    fill = {"pk": deployment.pk, "name": host.name, "root": 0, "path": "tiny"}
    fill |= {"host": host.name, "engine": "llamacpp"}
    fill |= {
        "run_id": run.pk,
        "token_id": token.pk,
        "content_type_id": 1,
        "object_id": "1",
        "id": 1,
        "response_id": "resp_matrix",
    }
    world = World(fill, watched=[host, deployment, run, token])
    world.callers["anonymous"] = ({}, {})
    world.callers["revoked-token"] = ({}, {"Authorization": f"Bearer {revoked_raw}"})
    for role, user in [("outsider", outsider), ("viewer", viewer), ("operator", operator)]:
        world.callers[role] = session_for(user)
    world.callers["admin"] = session_for(admin_user)
    return world


def may(caller: str, required: str) -> bool:
    if required == "public":
        return True
    if required in ("staff", "metrics", "unclassified"):
        return False
    return RANK.get(caller, 0) >= RANK[required]


def refused(response: httpx.Response) -> bool:
    if response.status_code in (401, 403, 405):
        return True
    location = response.headers.get("location", "")
    return response.status_code in (301, 302) and location.startswith(LOGIN_PAGES)


@pytest.fixture
def live(world: World, asgi_server: Any) -> Any:
    """The server, forked once the Hub stand-in and the model root are in place."""
    return asgi_server


def test_every_route_is_classified() -> None:
    routes = {r.route for r in declared_routes()}
    unclassified = sorted(r for r in routes if required_role(r) == "unclassified")
    assert not unclassified, f"say which role these need, in EXPECTED: {unclassified}"
    assert not set(EXPECTED) - routes, "EXPECTED names routes the URLconf no longer declares"
    declared_ws = {str(p.pattern) for p in websocket_urlpatterns}
    assert declared_ws == set(EXPECTED_WS)


def test_no_route_answers_someone_below_its_role(live: Any, world: World) -> None:
    before = world.snapshot()
    failures: list[str] = []
    routes = list(declared_routes())
    for caller, (cookies, headers) in world.callers.items():
        with httpx.Client(base_url=live.url, cookies=cookies, headers=headers, timeout=20) as client:  # fmt: skip
            for route in routes:
                failures += _ask(client, world, route, caller)
    assert not failures, "\n".join(failures)
    assert world.snapshot() == before, "a refused request changed something"
    assert len(routes) > len(EXPECTED)  # the admin site was walked too


def _ask(client: httpx.Client, world: World, route: Route, caller: str) -> list[str]:
    required = required_role(route.route)
    url, allowed = world.path(route), may(caller, required)
    failures = []
    for method in ("GET",) if allowed else ("GET", "POST"):
        r = client.request(method, url)
        what = f"{method} {url} as {caller} (needs {required}): {r.status_code}"
        if r.status_code >= 500:
            failures.append(f"{what} server error")
        elif not allowed and not refused(r):
            failures.append(f"{what} {r.headers.get('location', '')} not refused")
    return failures


async def test_no_websocket_route_accepts_someone_below_its_role(world: World) -> None:
    for pattern in websocket_urlpatterns:
        route = str(pattern.pattern)
        for caller, (cookies, headers) in world.callers.items():
            raw = [(b"origin", b"http://127.0.0.1")]
            if cookies:
                cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
                raw.append((b"cookie", cookie.encode()))
            raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
            filled = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(world.fill[m[1]]), route)
            comm = WebsocketCommunicator(_application(), f"/{filled}", headers=raw)
            connected, code = await comm.connect(timeout=5)
            allowed = may(caller, EXPECTED_WS[route])
            assert connected == allowed, (route, caller, code)
            if not allowed:
                assert code in (4401, 4403), (route, caller, code)
            await comm.disconnect()


def _application() -> Any:
    from controlpanel.asgi import application

    return application


# --- generated query strings on every page --------------------------------------------------

KNOWN_KEYS = ["page", "q", "sort", "min_b", "max_b", "status", "host", "owner", "actor", "action",
              "target", "since", "window", "revision", "ref", "gpus", "quantization", "gated",
              "license", "offset", "lines"]  # fmt: skip
HOSTILE_VALUES = [
    "-1",
    "0",
    "1e400",
    "nan",
    "9" * 50,
    "",
    "\x00",
    "2026-13-45",
    "../",
    "' OR 1=1 --",
]


def _pages() -> list[Route]:
    return [
        r for r in declared_routes()
        if not r.route.startswith(("admin/", "v1/")) and r.route != "accounts/logout/"
    ]  # fmt: skip


@pytest.fixture
def admin_pages(world: World, admin_user: Any) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    return client


def test_hostile_queries_on_every_page_never_500(world: World, admin_pages: Client) -> None:
    failures = []
    for route in _pages():
        for value in HOSTILE_VALUES:
            response = admin_pages.get(world.path(route), dict.fromkeys(KNOWN_KEYS, value))
            if response.status_code >= 500:
                failures.append(f"{route.route} ?…={value!r}: {response.status_code}")
    assert not failures, "\n".join(failures)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    index=st.integers(min_value=0),
    query=st.dictionaries(
        st.sampled_from(KNOWN_KEYS) | st.text(max_size=8),
        st.sampled_from(HOSTILE_VALUES) | st.text(max_size=20),
        max_size=3,
    ),
)
def test_generated_queries_on_every_page_never_500(
    world: World, admin_pages: Client, index: int, query: dict[str, str]
) -> None:
    routes = _pages()
    route = routes[index % len(routes)]
    response = admin_pages.get(world.path(route), query)
    assert response.status_code < 500, (route.route, query, response.status_code)
