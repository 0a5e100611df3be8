"""Which models (deployments or LoRA adapters) a caller may use in /v1/: an API token's own
list and its owner's teams' lists, each blank for any. A user in teams that all name models
may use the models some team of theirs names; a token's list narrows that further."""

from __future__ import annotations

from typing import Any

from deployments.lifecycle.limits import name_problem

MAX_NAMES = 100


class AllowlistError(ValueError):
    """A list that cannot be set; the message names the bad entry."""


def parse(raw: Any) -> str:
    """Names separated by spaces or commas, each a deployment or adapter name, sorted."""
    names = sorted({n for n in str(raw or "").replace(",", " ").lower().split() if n})
    for name in names:
        if problem := name_problem(name):
            raise AllowlistError(f"Models: {problem}")
    if len(names) > MAX_NAMES:
        raise AllowlistError(f"Models: at most {MAX_NAMES} names.")
    return " ".join(names)


def allowed(user: Any, token_models: str = "") -> frozenset[str] | None:
    """The models `user` (through a token listing `token_models`) may use; None: any."""
    lists = [t.allowed_models.split() for t in user.teams.all()] if user.pk else []
    team = None if not lists or any(not names for names in lists) else frozenset().union(*lists)
    own = frozenset(token_models.split()) or None
    if team is None:
        return own
    return team if own is None else team & own
