"""Preparing this host's engines: each engine's script run in a thread of its own, its lines read
as progress into the engine's row (deployments.host.prepare.rows).

At most one preparation per engine in this worker; the scripts themselves hold a lock per engine
cache, so two workers on one machine (or `make test` beside `make run`) prepare it once and the
second one finds it ready. The scripts run as argv lists (llama.sh nices its compiler) in a
process group of their own, which a worker that stops ends (they start over cleanly: a half-made
vLLM environment has no `.ready`, a half-built llama-server no binary).
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import threading
import time

from django.conf import settings
from django.db import DatabaseError, close_old_connections

from deployments.host import enginebins
from deployments.host.prepare import rows
from deployments.host.prepare.progress import Progress

log = logging.getLogger(__name__)

ENGINES = tuple(enginebins.SCRIPTS)
WRITE_EVERY_S = 1.0
HOST_WAIT_S = 60.0

_lock = threading.Lock()
_threads: dict[str, threading.Thread] = {}
_procs: dict[str, subprocess.Popen[str]] = {}
_stopping = threading.Event()


def start(engine: str, *, prepare: bool) -> bool:
    """Look for `engine` in the background, and prepare it when missing if `prepare` (else it
    is reported not installed); False when this worker is already on it."""
    with _lock:
        running = _threads.get(engine)
        if running is not None and running.is_alive():
            return False
        thread = threading.Thread(
            target=_guarded, args=(engine, prepare), name=f"prepare-{engine}", daemon=True
        )
        _threads[engine] = thread
        thread.start()
    return True


def start_all() -> None:
    """Every engine at the worker's start: the ones SHARDBOARD_PREPARE_ENGINES names are
    prepared when missing, the others only looked for."""
    _stopping.clear()
    for engine in ENGINES:
        start(engine, prepare=engine in settings.SHARDBOARD_PREPARE_ENGINES)


def stop_all() -> None:
    """The worker stops: end the scripts under way; their rows say the preparation stopped."""
    _stopping.set()
    with _lock:
        procs = dict(_procs)
    for engine, proc in procs.items():
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:  # now: the worker may exit before the preparation's thread writes it
            rows.ended(engine, Progress(), executable="", error="stopped with the host worker")
        except DatabaseError:
            log.exception("the stopped preparation of %s was not recorded", engine)


def _guarded(engine: str, prepare: bool) -> None:
    try:
        if _wait_for_host():
            look_or_prepare(engine, prepare=prepare)
    except DatabaseError:
        log.exception("the preparation of %s was not recorded", engine)
    finally:
        close_old_connections()


def _wait_for_host() -> bool:
    """The host row is written by the first heartbeat, which may come after this thread."""
    deadline = time.monotonic() + HOST_WAIT_S
    while not _stopping.is_set() and time.monotonic() < deadline:
        if rows.host_registered():
            return True
        time.sleep(0.5)
    return False


def look_or_prepare(engine: str, *, prepare: bool) -> None:
    variable = enginebins.BIN_ENV[engine]
    if named := os.environ.get(variable, ""):
        rows.found(engine, named, f"{variable} names it")
    elif path := enginebins.prepared(engine):
        rows.found(engine, path, "prepared earlier")
    elif prepare:
        run(engine)
    else:
        rows.absent(
            engine,
            f"this host worker does not prepare it (SHARDBOARD_PREPARE_ENGINES); set {variable} "
            f"or run scripts/{enginebins.SCRIPTS[engine]} on the host",
        )


def run(engine: str) -> None:
    """Run the engine's script to its end, its progress into the row."""
    rows.begin(engine)
    state = Progress()
    argv = ["bash", str(enginebins.script(engine))]
    try:
        proc = subprocess.Popen(  # noqa: S603 - our own script, an argv list
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
    except OSError as exc:
        rows.ended(engine, state, executable="", error=f"could not run {argv[1]}: {exc}")
        return
    with _lock:
        _procs[engine] = proc
    try:
        _follow(engine, proc, state)
        code = proc.wait()
    finally:
        with _lock:
            _procs.pop(engine, None)
    _end(engine, state, code)


def _follow(engine: str, proc: subprocess.Popen[str], state: Progress) -> None:
    """Progress (a new step, a new count) is written at once; the last lines at most once a
    second, and a second after the last one came (a step that prints nothing for minutes
    still shows the line it last printed)."""
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_read, args=(proc, lines), name=f"read-{engine}", daemon=True).start()
    written, dirty = 0.0, False
    while True:
        try:
            line = lines.get(timeout=WRITE_EVERY_S)
        except queue.Empty:
            line = ""
        if line is None:
            break
        moved = state.feed(line) if line else False
        dirty = dirty or bool(line)
        if moved or (dirty and time.monotonic() - written >= WRITE_EVERY_S):
            rows.progress(engine, state)
            written, dirty = time.monotonic(), False


def _read(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None  # noqa: S101 - stdout=PIPE
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)


def _end(engine: str, state: Progress, code: int) -> None:
    if _stopping.is_set() and code != 0:
        rows.ended(engine, state, executable="", error="stopped with the host worker")
        return
    if code != 0:
        rows.ended(engine, state, executable="", error=state.reason(code))
        return
    path = enginebins.prepared(engine)
    error = (
        "" if path else f"scripts/{enginebins.SCRIPTS[engine]} ended well, but --path finds none"
    )
    rows.ended(engine, state, executable=path or "", error=error)
