"""Sending a whole file's bytes: throttled to a rate, or cut off once after some bytes (the
connection drops mid-file, as a flaky network does; the client has to resume with a Range)."""

from __future__ import annotations

import contextlib
import socket
import time
from http.server import BaseHTTPRequestHandler

from tests.support.hubstub.repos import RepoFile

CHUNK_BYTES = 256 * 1024


def send_file(
    handler: BaseHTTPRequestHandler,
    file: RepoFile,
    start: int,
    throttle_bps: int,
    cut_after: int | None,
    *,
    end: int | None = None,
) -> None:
    """Bytes ``start`` up to ``end`` (exclusive; None: the end of the file)."""
    began, sent = time.monotonic(), 0
    left = (file.size if end is None else end) - start
    for whole in _chunks(file, start):
        chunk, left = whole[: max(left, 0)], left - len(whole)
        if not chunk:
            return
        if cut_after is not None and sent + len(chunk) > cut_after:
            handler.wfile.write(chunk[: max(cut_after - sent, 0)])
            handler.wfile.flush()
            with contextlib.suppress(OSError):
                handler.connection.shutdown(socket.SHUT_RDWR)
            handler.close_connection = True
            return
        try:
            handler.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True  # the client stopped reading (a cancel)
            return
        sent += len(chunk)
        if throttle_bps:
            ahead = sent / throttle_bps - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)


def _chunks(file: RepoFile, start: int):  # type: ignore[no-untyped-def]
    if file.path is None:
        content = file.content or b""
        for offset in range(start, len(content), CHUNK_BYTES):
            yield content[offset : offset + CHUNK_BYTES]
        return
    with file.path.open("rb") as f:
        f.seek(start)
        while chunk := f.read(CHUNK_BYTES):
            yield chunk
