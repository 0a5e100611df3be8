"""The web server: uvicorn, with the options Shardboard is measured and tested with.

    python -m controlpanel.webserver   # SHARDBOARD_BIND, SHARDBOARD_PORT, SHARDBOARD_WEB_WORKERS,
                                       # LOG_LEVEL (INFO: one access line per request)

uvicorn rather than daphne, measured on a 2-core machine: a trivial streaming app answered 32
requests arriving together with its first byte after 2.5 ms (daphne: 11.4 ms); Twisted's write
path costs about a quarter more CPU per relayed chunk; 1000 browsers on the live GPU stream
got samples at p99 78 ms (daphne: 112 ms) for half the server CPU (bench/ws_fanout.py).
uvicorn is also what vLLM serves with. daphne stays installed for `manage.py runserver` only.

The tests' live server (tests/conftest.py) runs `config()` too, so what is tested is what runs.
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

from controlpanel import env

APP = "controlpanel.asgi:application"
OPTIONS: dict[str, Any] = {
    "http": "httptools",
    "ws": "websockets-sansio",
    "loop": "asyncio",
    "lifespan": "off",  # Django's ASGI handler has no lifespan events
    "ws_ping_interval": 20.0,
    "ws_ping_timeout": 20.0,
    "timeout_graceful_shutdown": 10,  # then open streams and websockets are cut
    "server_header": False,
}


def config(app: Any, **overrides: Any) -> uvicorn.Config:
    return uvicorn.Config(app, **{**OPTIONS, **overrides})


def main() -> None:
    try:
        host = env.env_str("SHARDBOARD_BIND", "").strip() or "127.0.0.1"
        port = env.env_int("SHARDBOARD_PORT", 8000, low=1, high=65535)
        # More than one process: each has its own event loop (the gateway's streams spread over
        # the CPUs); what they share lives in Redis and the database.
        workers = env.env_int("SHARDBOARD_WEB_WORKERS", 1, low=1, high=64)
    except env.ConfigError as exc:  # one line, as the ASGI app itself reports bad settings
        sys.stderr.write(f"shardboard: configuration error: {exc}\n")
        raise SystemExit(2) from None
    log_level = env.env_str("LOG_LEVEL", "").strip().lower() or "info"
    uvicorn.run(APP, host=host, port=port, workers=workers, log_level=log_level, **OPTIONS)


if __name__ == "__main__":
    main()
