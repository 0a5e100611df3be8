"""One thread per engine: follows the engine's log file on this host and ships new lines.

The engine writes to its file as before (it never waits on us, and it survives a worker
restart, which a pipe would not). Every POLL_S the thread reads what was added, turns it into
clean lines and sends them in one pipeline: an XADD per line with the stream's bound and the
shipped offset, then one PUBLISH of the batch for the pages watching live. A Redis that is
down costs the lines read in that pass (the host's file keeps them all), never the engine's
time: the next pass tries again with the lines written since.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import redis

from deployments.host.logship.cleaning import LineSplitter, Masker, clean_line
from deployments.live import enginelog

log = logging.getLogger(__name__)

POLL_S = 0.25
READ_CHUNK_BYTES = 64 * 1024
# Shipping costs about 20 µs of the worker's CPU per line (bench/engine_log_ship.py): a pass
# reads at most PASS_BUDGET_BYTES (about 2000 lines, under 15% of a core at POLL_S), and an
# engine that writes faster than that is not chased: past SKIP_AHEAD_BYTES behind, the
# follower jumps to the last RESUME_BYTES and says how much it skipped.
PASS_BUDGET_BYTES = 256 * 1024
SKIP_AHEAD_BYTES = 4 * 1024 * 1024
RESUME_BYTES = 256 * 1024
BATCH_LINES = 500  # lines per pipeline and per published message
WARN_EVERY_S = 60.0


class Follower:
    def __init__(
        self,
        *,
        pk: int,
        path: Path,
        mask: Masker,
        client: redis.Redis,
        channel: str,
        start_offset: int = 0,
        max_lines: int = enginelog.STREAM_MAX_LINES,
        poll_s: float = POLL_S,
        on_lines: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.on_lines = on_lines  # also handed each batch of clean lines (the launch steps)
        self.pk, self.path, self.mask, self.client = pk, path, mask, client
        self.channel, self.max_lines, self.poll_s = channel, max_lines, poll_s
        self.offset = start_offset  # bytes of the file read so far
        self.shipped_lines = 0
        self.dropped_lines = 0  # lost to a Redis error (still in the host's file)
        self._splitter = LineSplitter()
        self._drop_first = False  # after a skip: the first line read is the end of a line
        self.skipped_bytes = 0
        self._file: IO[bytes] | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # a pass now, not at the next poll (stop, catch_up)
        self._passes = threading.Condition()
        self._begun = self._ended = 0  # passes begun and ended, for catch_up
        self._warned_at = -WARN_EVERY_S
        self._thread = threading.Thread(target=self._run, name=f"logship-{pk}", daemon=True)

    def start(self) -> Follower:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Ship what is left and end the thread; False if it did not end in time."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def catch_up(self, timeout_s: float = 2.0) -> bool:
        """Return once a pass that began after this call has ended: every line the engine
        wrote before the call has been read. The launch calls it when the readiness probe
        passed, so the lines that led there (the last start-up step) are recorded before
        `ready` is; without it a fast engine's probe beat the next poll. False on timeout or
        once the follower has ended."""
        with self._passes:
            target = self._begun + 1
            self._wake.set()
            self._passes.wait_for(
                lambda: self._ended >= target or not self._thread.is_alive(), timeout_s
            )
            return self._ended >= target

    def _run(self) -> None:
        try:
            while True:
                self._wake.wait(self.poll_s)
                self._wake.clear()
                final = self._stop.is_set()
                with self._passes:
                    self._begun += 1
                    this_pass = self._begun
                try:
                    self._pass(SKIP_AHEAD_BYTES if final else PASS_BUDGET_BYTES, final)
                except (redis.RedisError, OSError) as exc:
                    self._warn(exc)
                finally:
                    with self._passes:
                        self._ended = this_pass
                        self._passes.notify_all()
                if final:
                    return
        finally:
            if self._file is not None:
                self._file.close()

    def _pass(self, budget_bytes: int, final: bool) -> None:
        handle = self._open()
        if handle is None:
            return
        self._skip_ahead(handle)
        read = 0
        while read < budget_bytes:
            data = handle.read(READ_CHUNK_BYTES)
            self.offset += len(data)
            read += len(data)
            lines = self._splitter.feed(data)
            if self._drop_first and lines:
                lines, self._drop_first = lines[1:], False
            if final and not data:
                lines += self._splitter.flush()
            if lines:
                self._ship(lines)
            if not data:
                return

    def _skip_ahead(self, handle: IO[bytes]) -> None:
        size = os.fstat(handle.fileno()).st_size
        if size - self.offset <= SKIP_AHEAD_BYTES:
            return
        skipped = size - RESUME_BYTES - self.offset + self._splitter.pending_bytes
        self.skipped_bytes += skipped
        self.offset = size - RESUME_BYTES
        handle.seek(self.offset)
        self._splitter, self._drop_first = LineSplitter(), True
        note = (
            f"[shardboard] {skipped} bytes of engine output skipped: written faster than they "
            "can be shipped (the log file on the host keeps them)"
        )
        self._ship([note.encode()])

    def _open(self) -> IO[bytes] | None:
        if self._file is None:
            try:
                self._file = self.path.open("rb")
            except FileNotFoundError:
                return None
            if self._file.seek(0, 2) < self.offset:
                self.offset = 0  # not the file the saved offset was about
            self._file.seek(self.offset)
        return self._file

    def _ship(self, raw_lines: list[bytes]) -> None:
        texts = [clean_line(raw, self.mask) for raw in raw_lines]
        if self.on_lines is not None:
            self.on_lines(texts)
        key, done = enginelog.stream_key(self.pk), self.offset - self._splitter.pending_bytes
        for start in range(0, len(texts), BATCH_LINES):
            batch = texts[start : start + BATCH_LINES]
            try:
                pipe = self.client.pipeline(transaction=False)
                for text in batch:
                    pipe.xadd(key, {"l": text}, maxlen=self.max_lines, approximate=True)
                pipe.hset(
                    enginelog.position_key(self.pk),
                    mapping={"path": str(self.path), "offset": done},
                )
                ids = [i.decode() for i in pipe.execute()[: len(batch)]]
                self.client.publish(
                    self.channel, enginelog.encode_batch(self.pk, zip(ids, batch, strict=True))
                )
            except (redis.RedisError, OSError):
                self.dropped_lines += len(texts) - start  # not retried line by line: next pass
                raise
            self.shipped_lines += len(batch)

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.warning("engine log of deployment %s: cannot ship to Redis (%s)", self.pk, exc)
