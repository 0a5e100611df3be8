"""Settings read from the environment, with one clear line when a value is wrong.

Every reader raises `ConfigError` naming the variable, so start-up stops with a message such as
``REDIS_URL is not a redis:// URL: 'http://x'`` instead of a traceback deep inside a library.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_DB_SCHEMES = {"sqlite", "postgres", "postgresql", "pgsql"}
_REDIS_SCHEMES = {"redis", "rediss", "unix"}


class ConfigError(Exception):
    """A setting from the environment is malformed; the message names the variable."""


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name} must be one of 1/0, true/false, yes/no, on/off; got {raw!r}")


def env_float(name: str, default: float, *, low: float, high: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number; got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}; got {raw!r}")
    return value


def env_int(name: str, default: int, *, low: int, high: int) -> int:
    return int(env_float(name, default, low=low, high=high))


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def database_url(name: str, default: str) -> str:
    raw = os.environ.get(name, default)
    parts = urlsplit(raw)
    if parts.scheme not in _DB_SCHEMES:
        raise ConfigError(
            f"{name} must look like postgres://user:pass@host:5432/db or sqlite:///path; got {raw!r}"
        )
    if parts.scheme != "sqlite" and not (parts.hostname or parts.path.strip("/")):
        raise ConfigError(f"{name} names no host or database; got {raw!r}")
    try:
        _ = parts.port
    except ValueError:
        raise ConfigError(f"{name} has a bad port; got {raw!r}") from None
    return raw


def redis_url(name: str, default: str) -> str:
    raw = os.environ.get(name, default)
    parts = urlsplit(raw)
    if parts.scheme not in _REDIS_SCHEMES:
        raise ConfigError(
            f"{name} must be a redis:// URL such as redis://127.0.0.1:6379/0; got {raw!r}"
        )
    try:
        _ = parts.port
    except ValueError:
        raise ConfigError(f"{name} has a bad port; got {raw!r}") from None
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(f"{name} names no host; got {raw!r}")
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise ConfigError(f"{name} must end in a database number like /0; got {raw!r}")
    return raw


def secret_key(var_dir: Path) -> str:
    """SECRET_KEY from the environment, else one generated once and kept under var/."""
    if key := os.environ.get("SECRET_KEY"):
        return key
    path = var_dir / "secret_key"
    if path.exists():
        return path.read_text().strip()
    var_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key)
    return key
