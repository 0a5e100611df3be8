"""What the processes a test starts need: the repository root and an environment
on the test database."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The URL of the database the tests run on, for processes the tests start."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DATABASE_URL=database_url(), SHARDBOARD_VAR_DIR=str(settings.VAR_DIR))
    # A test's worker only looks for the engines (make test prepared them); the tests of the
    # preparation itself name fake scripts and what to prepare (tests/support/fake_prep.py).
    env["SHARDBOARD_PREPARE_ENGINES"] = ""
    env.update(extra)
    return env
