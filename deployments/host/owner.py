"""Whose engine is this: the owner marker a host worker puts on the engines it spawns.

`SHARDBOARD_DEPLOYMENT_ID` alone is ambiguous on a machine shared by two Shardboard
installations (staging beside production, a test run beside `make run`): ids are small
integers, so deployment 1 of one installation looks like deployment 1 of the other. Engines
also carry `SHARDBOARD_ENGINE_OWNER=<host name>@<installation id>`, and a worker adopts,
fails or stops only engines whose owner is its own.

The installation id is a hash of the database's identity (vendor, NAME, HOST, PORT): the one
thing the web process and every host worker of an installation must share (they share its
rows, deployment ids included), and that two installations cannot share without being one.
It is stable across restarts, differs between test databases and `make run`, and holds no
secret (no password, no SECRET_KEY: the marker is readable in /proc by the same user).
SQLite's NAME is a file path, made absolute so that two working directories agree.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from django.conf import settings
from django.db import connections

_ID_HEX = 12


def installation_id() -> str:
    """12 hex digits naming this installation; read from the live connection settings."""
    db = connections["default"].settings_dict
    name = str(db.get("NAME") or "")
    if connections["default"].vendor == "sqlite" and name and not name.startswith(":memory:"):
        name = str(Path(name).resolve())
    identity = "|".join(
        [connections["default"].vendor, name, str(db.get("HOST") or ""), str(db.get("PORT") or "")]
    )
    return hashlib.sha256(identity.encode()).hexdigest()[:_ID_HEX]


def engine_owner(host_name: str | None = None) -> str:
    """The owner marker of engines this host's worker spawns, e.g. ``gpu-1@3f9c0a1b2c4d``."""
    return f"{host_name or settings.SHARDBOARD_HOST_NAME}@{installation_id()}"
