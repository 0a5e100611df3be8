"""A token's lookup: live tokens only (not revoked, not expired, an active user), one query a
request and one UPDATE of `last_used_at` a minute at most; the scope decides what it may do."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from playground import services, tokens
from playground.models import ApiToken, Scope
from playground.selectors import tokens_of

pytestmark = pytest.mark.django_db


def test_a_fresh_token_costs_one_query(operator: Any, django_assert_num_queries: Any) -> None:
    token, raw = services.token_create(user=operator, name="t", scopes=[Scope.READ])
    with django_assert_num_queries(2):  # the lookup, and the first last-used write
        assert tokens.token_for(raw) == token
    with django_assert_num_queries(1):
        assert tokens.token_for(raw) == token


def test_only_live_tokens_are_found(operator: Any) -> None:
    token, raw = services.token_create(
        user=operator, name="t", scopes=Scope.values, expires_at=timezone.now() + timedelta(hours=1)
    )  # fmt: skip
    assert tokens.token_user(raw) == operator
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now())
    assert tokens.token_for(raw) is None
    ApiToken.objects.filter(pk=token.pk).update(expires_at=None)
    operator.is_active = False
    operator.save()
    assert tokens.token_for(raw) is None
    assert tokens.token_for("not-ours") is None


def test_the_scope_decides(operator: Any) -> None:
    _, raw = services.token_create(user=operator, name="t", scopes=[Scope.READ])
    assert tokens.token_user(raw, scope=Scope.READ) == operator
    assert tokens.token_user(raw) is None  # /v1/ asks for infer
    _, playground = services.token_create(user=operator, name="playground")
    assert tokens.token_for(playground).scope_list == ["infer"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("scopes", "expires_in", "error"),
    [([], None, "scopes: choose at least one"), (["root"], None, "scopes: unknown root"),
     (["read"], timedelta(seconds=-1), "expires_at: give a time in the future")],
)  # fmt: skip
def test_a_bad_token_is_refused_naming_the_field(
    operator: Any, scopes: list[str], expires_in: timedelta | None, error: str
) -> None:
    expires_at = None if expires_in is None else timezone.now() + expires_in
    with pytest.raises(services.TokenError, match=error):
        services.token_create(user=operator, name="t", scopes=scopes, expires_at=expires_at)
    assert not ApiToken.objects.exists()


def test_the_playground_lists_only_live_infer_tokens(operator: Any) -> None:
    kept, _ = services.token_create(user=operator, name="kept", scopes=["infer", "read"])
    services.token_create(user=operator, name="read only", scopes=["read"])
    gone, _ = services.token_create(user=operator, name="gone")
    ApiToken.objects.filter(pk=gone.pk).update(expires_at=timezone.now())
    assert list(tokens_of(user=operator)) == [kept]
