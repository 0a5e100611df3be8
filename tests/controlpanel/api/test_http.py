"""The automation API over plain HTTP on a real server: every endpoint with a token of each
scope (only its own scope passes), the role bounding every token, expired and revoked tokens
refused, the session's CSRF on writes, and refusals as JSON naming the field, never a 500."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from controlpanel.auditchain.canonical import GENESIS, row_hash
from controlpanel.models import AuditEvent
from deployments.models import Deployment
from playground import services
from playground.models import ApiToken, Scope
from tests.support.gateway import session_for
from tests.support.hosts import sim_host

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

HOST = "apihost"


@dataclass(frozen=True)
class Call:
    method: str
    path: str  # {d}: a stopped deployment's id
    scope: Scope
    role: str
    passed: int  # the status once the caller may: a refusal after auth (422/409) keeps it idle
    body: dict[str, Any] | None = None


CALLS = [
    Call("GET", "/api/v1/deployments", Scope.READ, "Viewer", 200),
    Call("GET", "/api/v1/deployments?team=red", Scope.READ, "Viewer", 200),
    Call("GET", "/api/v1/deployments/{d}", Scope.READ, "Viewer", 200),
    Call(
        "POST",
        "/api/v1/deployments",
        Scope.DEPLOY,
        "Operator",
        422,
        {"name": "Not A Name!", "model_ref": "local:0/tiny", "host": HOST},
    ),
    Call(
        "POST",
        "/api/v1/deployments",
        Scope.DEPLOY,
        "Operator",
        422,
        {
            "name": "Bad!",
            "model_ref": "local:0/tiny",
            "host": HOST,
            "team": None,
            "hosts": ["other"],
        },
    ),
    Call("POST", "/api/v1/deployments/{d}/stop", Scope.DEPLOY, "Operator", 409),
    Call("POST", "/api/v1/deployments/{d}/scale", Scope.DEPLOY, "Operator", 409, {"replicas": 2}),
    Call("GET", "/api/v1/hosts", Scope.READ, "Viewer", 200),
    Call("GET", f"/api/v1/gpus?host={HOST}", Scope.READ, "Viewer", 200),
    Call("GET", f"/api/v1/plan?ref=local:0/tiny&target={HOST}", Scope.READ, "Viewer", 200),
    Call(
        "GET",
        f"/api/v1/plan?ref=local:0/tiny&target=picked&hosts={HOST}&hosts=other",
        Scope.READ,
        "Viewer",
        200,
    ),
    Call("GET", "/api/v1/plan?ref=local:0/tiny&target=fleet", Scope.READ, "Viewer", 200),
    Call("GET", "/api/v1/audit?limit=5", Scope.AUDIT, "Admin", 200),
    Call(
        "GET",
        "/api/v1/audit?after_id=1&limit=5&action=deployment.create",
        Scope.AUDIT,
        "Admin",
        200,
    ),
    Call("GET", "/api/v1/usage", Scope.READ, "Operator", 200),
    Call("GET", "/api/v1/usage?days=7&team=", Scope.READ, "Operator", 200),
    Call("GET", "/api/v1/openapi.json", Scope.READ, "Viewer", 200),
    Call("GET", "/api/v1/", Scope.READ, "Viewer", 200),
    Call("GET", "/v1/models", Scope.INFER, "Operator", 200),
]


@dataclass
class World:
    url: str
    stopped: Deployment
    tokens: dict[tuple[str, str], str]  # (user, scope or "all") -> raw

    def bearer(self, user: str, scope: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[user, scope]}"}

    def path(self, call: Call) -> str:
        return self.url + call.path.format(d=self.stopped.pk)


@pytest.fixture
def world(
    model_root: Any, viewer: Any, operator: Any, admin_user: Any, asgi_server: Any
) -> Iterator[World]:
    sim_host(HOST, 2)
    stopped = Deployment.objects.create(
        name="gone", model_id="/m", engine="transformers", host_id=sim_host("other", 1).pk,
        status="stopped", created_by=operator,
    )  # fmt: skip
    tokens = {}
    for name, user in [("viewer", viewer), ("operator", operator), ("admin", admin_user)]:
        tokens[name, "all"] = services.token_create(user=user, name="all", scopes=Scope.values)[1]
    for scope in Scope.values:
        tokens["admin", scope] = services.token_create(user=admin_user, name=scope, scopes=[scope])[
            1
        ]
    yield World(asgi_server.url, stopped, tokens)


def ask(world: World, call: Call, headers: dict[str, str], **kw: Any) -> httpx.Response:
    return httpx.request(
        call.method, world.path(call), json=call.body, headers=headers, timeout=30, **kw
    )


def test_each_endpoint_takes_only_its_own_scope(world: World) -> None:
    failures = []
    for call in CALLS:
        for scope in Scope.values:
            r = ask(world, call, world.bearer("admin", scope))
            want = call.passed if scope == call.scope else 403
            if r.status_code != want:
                failures.append(f"{call.method} {call.path} with {scope}: {r.status_code} {r.text[:200]}")  # fmt: skip
            elif want == 403 and f"'{call.scope.value}' scope" not in r.text:
                failures.append(f"{call.method} {call.path}: the refusal names no scope: {r.text}")
    assert not failures, "\n".join(failures)


def test_the_role_bounds_every_token(world: World) -> None:
    for call in CALLS:
        for user in ("viewer", "operator", "admin"):
            r = ask(world, call, world.bearer(user, "all"))
            allowed = ["viewer", "operator", "admin"].index(user) >= [
                "Viewer", "Operator", "Admin"
            ].index(call.role)  # fmt: skip
            assert r.status_code == (call.passed if allowed else 403), (call, user, r.text)
            if not allowed and call.path.startswith("/api/"):
                assert f"{call.role} role" in r.json()["message"]


def test_strangers_expired_and_revoked_tokens_are_refused(world: World, operator: Any) -> None:
    token, raw = services.token_create(
        user=operator, name="soon", scopes=Scope.values, expires_at=timezone.now() + timedelta(days=1)
    )  # fmt: skip
    revoked, revoked_raw = services.token_create(user=operator, name="r", scopes=Scope.values)
    assert services.token_revoke(user=operator, token_id=revoked.pk)
    read = CALLS[0]
    assert ask(world, read, {"Authorization": f"Bearer {raw}"}).status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    for call in (read, CALLS[-1]):  # the API and /v1/
        for headers in (
            {"Authorization": f"Bearer {raw}"},
            {"Authorization": f"Bearer {revoked_raw}"},
            {"Authorization": "Bearer sb-not-a-token"},
            {},
        ):
            r = ask(world, call, headers)
            assert r.status_code == 401, (call.path, headers, r.text)
            assert r.headers["content-type"].startswith("application/json")


def test_last_used_moves_at_most_once_a_minute(world: World, operator: Any) -> None:
    token, raw = services.token_create(user=operator, name="t", scopes=[Scope.READ])
    assert token.last_used_at is None
    ask(world, CALLS[0], {"Authorization": f"Bearer {raw}"})
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    ask(world, CALLS[0], {"Authorization": f"Bearer {raw}"})
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    ask(world, CALLS[0], {"Authorization": f"Bearer {raw}"})
    assert ApiToken.objects.get(pk=token.pk).last_used_at > first


def test_a_session_writes_only_with_its_csrf_token(world: World, operator: Any) -> None:
    cookies, headers = session_for(operator)
    stop = next(c for c in CALLS if c.path.endswith("/stop"))
    r = httpx.post(world.path(stop), cookies=cookies, timeout=30)
    assert r.status_code == 403 and "CSRF" in r.json()["message"]
    r = httpx.post(world.path(stop), cookies=cookies, headers=headers, timeout=30)
    assert r.status_code == 409 and "already stopped" in r.json()["message"]
    r = httpx.get(world.path(CALLS[0]), cookies=cookies, timeout=30)
    assert r.status_code == 200 and world.stopped.pk in [d["id"] for d in r.json()]


BAD = [
    ("POST", "/api/v1/deployments", b"{not json", "body"),
    ("POST", "/api/v1/deployments", b'{"name": "x"}', "model_ref"),
    (
        "POST",
        "/api/v1/deployments",
        b'{"name": "ok", "model_ref": "local:0/tiny", "host": "apihost", "replicas": 0}',
        "replicas",
    ),
    (
        "POST",
        "/api/v1/deployments",
        b'{"name": "ok", "model_ref": "local:0/tiny", "host": "nowhere"}',
        "host",
    ),
    ("POST", "/api/v1/deployments/{d}/scale", b'{"replicas": "many"}', "replicas"),
    ("POST", "/api/v1/deployments/{d}/scale", b'{"replicas": 99}', "replicas"),
    ("GET", "/api/v1/deployments/999999", b"", "no deployment 999999"),
    ("GET", "/api/v1/deployments/99999999999999999999999", b"", "no deployment"),
    ("GET", "/api/v1/audit?since=2026-13-45", b"", "since"),
    ("GET", "/api/v1/audit?after_id=99999999999999999999", b"", "after_id"),
    ("GET", "/api/v1/audit?after_id=-1", b"", "after_id"),
    ("GET", "/api/v1/audit?limit=0", b"", "limit"),
    ("GET", "/api/v1/audit?limit=501", b"", "limit"),
    ("GET", "/api/v1/usage?days=nan", b"", "days"),
    ("GET", "/api/v1/usage?days=93", b"", "days"),
    ("GET", "/api/v1/usage?team=nobody", b"", "query.team"),
    (
        "POST",
        "/api/v1/deployments",
        b'{"name": "ok", "model_ref": "local:0/tiny", "host": "apihost", "team": "nobody"}',
        "body.team: Unknown team",
    ),
    (
        "POST",
        "/api/v1/deployments",
        b'{"name": "ok", "model_ref": "local:0/tiny", "host": "apihost", "hosts": "other"}',
        "hosts",
    ),
    ("GET", "/api/v1/plan?ref=local:0/tiny&target=picked", b"", "Pick at least one host"),
    ("GET", "/api/v1/plan?ref=local:0/tiny&target=picked&hosts=nowhere", b"", "nowhere"),
    ("GET", "/api/v1/plan", b"", "ref"),
    ("GET", "/api/v1/plan?ref=local:0/tiny&target=nowhere", b"", "nowhere"),
    ("GET", "/api/v1/plan?ref=local:0/tiny&replicas=lots", b"", "replicas"),
    ("GET", "/api/v1/plan?ref=local:0/missing", b"", "missing"),
]


def test_bad_input_is_json_naming_the_field(world: World) -> None:
    failures = []
    headers = {**world.bearer("admin", "all"), "Content-Type": "application/json"}
    for method, path, body, named in BAD:
        url = world.url + path.format(d=world.stopped.pk)
        r = httpx.request(method, url, content=body or None, headers=headers, timeout=30)
        if not 400 <= r.status_code < 500 or named not in r.json().get("message", ""):
            failures.append(f"{method} {path} {body!r}: {r.status_code} {r.text[:300]}")
    assert not failures, "\n".join(failures)


def test_audit_is_keyset_paged_filtered_and_its_chain_checks(world: World, admin_user: Any) -> None:
    """A client walks the trail by after_id, oldest first, and re-computes every row's hash
    from what the API gave it: the chain links, and a row changed on the way would not."""
    headers, url = world.bearer("admin", "audit"), f"{world.url}/api/v1/audit"
    seen: list[dict[str, Any]] = []
    after: int | None = 0
    while after is not None:
        page = httpx.get(url, params={"after_id": after, "limit": 2}, headers=headers, timeout=30)
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["items"]) <= 2
        seen += body["items"]
        after = body["next_after_id"]
        assert after is None or after == body["items"][-1]["id"]
    assert [e["id"] for e in seen] == list(
        AuditEvent.objects.order_by("id").values_list("pk", flat=True)
    )
    previous = GENESIS
    for item in seen:
        assert item["prev_hash"] == previous
        fields = {k: item[k] for k in HASHED}
        fields["created_at"] = datetime.fromisoformat(item["created_at"])
        assert row_hash(**fields) == item["row_hash"], item
        previous = item["row_hash"]
    forged = {**fields, "detail": {**item["detail"], "scopes": ["all"]}}
    assert row_hash(**forged) != item["row_hash"]
    r = httpx.get(
        url,
        params={"action": "playground.apitoken.create", "actor": "ada", "after_id": seen[1]["id"]},
        headers=headers,
        timeout=30,
    )
    items = r.json()["items"]
    assert items and {(e["action"], e["actor"]) for e in items} == {("playground.apitoken.create", "ada-admin")}  # fmt: skip
    assert all(e["id"] > seen[1]["id"] for e in items)
    assert isinstance(items[0]["detail"], dict) and "scopes" in items[0]["detail"]


HASHED = (
    "seq", "prev_hash", "created_at", "actor_id", "actor_name", "action", "target_type",
    "target_id", "detail", "client_ip",
)  # fmt: skip
