"""The site's pages refuse a body past DATA_UPLOAD_MAX_MEMORY_SIZE before Django reads it, on a
real server: declared too large, 413 at once; chunked, 413 as soon as it passes the limit."""

from __future__ import annotations

import http.client
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

LIMIT = 64 * 1024


@pytest.fixture
def live(settings: Any, asgi_server: Any) -> Any:
    return asgi_server


@pytest.fixture(autouse=True)
def small_limit(settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = LIMIT  # before the server forks


def _ask(url: str, head: str, *chunks: bytes) -> tuple[int, str]:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head.encode())
        for chunk in chunks:
            sock.sendall(chunk)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, response.read().decode()


def test_a_declared_50_mb_is_413_before_a_byte_is_read(live: Any) -> None:
    head = (
        "POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 50000000\r\n\r\n"
    )
    status, text = _ask(live.url, head)  # not one byte of the body sent
    assert status == 413
    assert f"at most {LIMIT:,} bytes" in text


def test_a_chunked_body_is_cut_at_the_limit(live: Any) -> None:
    head = (
        "POST /deployments/new/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"a" * 16384
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
    status, _ = _ask(live.url, head, *[chunk] * (LIMIT // len(piece) + 2))  # never the end
    assert status == 413


def test_bodies_under_the_limit_reach_django(live: Any) -> None:
    r = httpx.post(f"{live.url}/accounts/login/", data={"username": "x", "pad": "p" * 60_000})
    assert r.status_code == 403  # Django answered: the CSRF check, not the size
    r = httpx.post(f"{live.url}/accounts/login/", data={"username": "x", "pad": "p" * 70_000})
    assert r.status_code == 413
