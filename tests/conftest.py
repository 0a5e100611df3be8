"""Shared fixtures: personas, a real ASGI server, a real browser, a real Celery host worker."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from asgiref.sync import SyncToAsync
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connections

from deployments.catalog.demo_model import make_tiny_llama

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "correct-horse-battery-staple"


def _make_user(username: str, role: str | None) -> Any:
    user = get_user_model().objects.create_user(username=username, password=PASSWORD)
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.fixture
def viewer(db: None) -> Any:
    return _make_user("vera-viewer", "viewer")


@pytest.fixture
def operator(db: None) -> Any:
    return _make_user("otto-operator", "operator")


@pytest.fixture
def admin_user(db: None) -> Any:
    return _make_user("ada-admin", "admin")


@pytest.fixture
def outsider(db: None) -> Any:
    return _make_user("olga-outsider", None)


def database_url() -> str:
    """The URL of the database the tests run on, for processes the tests start."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DATABASE_URL=database_url(), SHARDBOARD_VAR_DIR=str(settings.VAR_DIR))
    env.update(extra)
    return env


# --- a real ASGI server (uvicorn, as `make run` starts it) on the test database ---------------


@dataclass
class LiveServer:
    url: str
    ws_url: str
    restart: Callable[[], None]


def _make_application() -> Any:
    from channels.routing import get_default_application
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    return ASGIStaticFilesHandler(get_default_application())


_FORK = multiprocessing.get_context("fork")


class ServerProcess(_FORK.Process):
    """controlpanel.webserver's uvicorn in a forked child, on 127.0.0.1:`port` (0: any)."""

    def __init__(self, port: int = 0) -> None:
        super().__init__(daemon=True)
        self.requested_port = port
        self.port = _FORK.Value("i", 0)
        self.ready = _FORK.Event()

    def run(self) -> None:
        from controlpanel import webserver

        sock = webserver.listening_socket("127.0.0.1", self.requested_port)
        self.port.value = sock.getsockname()[1]
        ready = self.ready

        class Server(webserver.Server):
            async def startup(self, sockets: Any = None) -> None:
                await super().startup(sockets)
                ready.set()

        config = webserver.config(
            _make_application(), log_level="warning", timeout_graceful_shutdown=1
        )
        Server(config).run(sockets=[sock])


def _start_server(port: int = 0) -> ServerProcess:
    # The server is forked after pytest-django switched settings to the test database, so
    # it needs no database set-up of its own.
    connections.close_all()
    # Async tests leave asgiref's single sync thread running here; a forked child would inherit
    # the executor without its thread and every database_sync_to_async call would hang.
    SyncToAsync.single_thread_executor = ThreadPoolExecutor(max_workers=1)
    proc = ServerProcess(port)
    proc.start()
    if not proc.ready.wait(timeout=20):
        proc.kill()
        raise RuntimeError("the web server did not start")
    return proc


def _stop_server(proc: ServerProcess) -> None:
    proc.terminate()
    proc.join(10)
    if proc.is_alive():
        proc.kill()
        proc.join(5)


@pytest.fixture
def asgi_server(transactional_db: None, settings: Any) -> Iterator[LiveServer]:
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
    box = {"proc": _start_server()}
    port = box["proc"].port.value

    def restart() -> None:
        _stop_server(box["proc"])
        box["proc"] = _start_server(port)

    yield LiveServer(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}", restart)
    _stop_server(box["proc"])


# --- a real browser ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: scripts/setup.sh --test installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop on this thread; the ORM calls that tests make
    # between browser steps are still plain synchronous calls.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context()
    context.set_default_timeout(10_000)
    tab = context.new_page()
    yield tab
    context.close()


def login(page: Any, server: LiveServer, username: str, password: str = PASSWORD) -> None:
    page.goto(f"{server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


# --- a real Celery host worker process -------------------------------------------------------


@dataclass
class WorkerProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def spawn_worker(name: str, log_dir: Path, **extra_env: str) -> WorkerProcess:
    log_path = log_dir / f"worker-{name}-{time.monotonic_ns()}.log"
    cmd = [
        sys.executable,
        str(ROOT / "manage.py"),
        "hostworker",
        "--name",
        name,
        "--loglevel",
        "INFO",
        "--no-default-queue",
    ]
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=child_env(**extra_env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return WorkerProcess(name, proc, log_path, extra_env)


@pytest.fixture
def host_worker(transactional_db: None, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(name: str = "testhost", **extra_env: str) -> WorkerProcess:
        worker = spawn_worker(name, tmp_path, **extra_env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def wait_for(predicate: Callable[[], Any], timeout_s: float = 10, interval_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests last: Playwright's sync API leaves an event loop on the main thread,
    which would stop pytest-asyncio from running the async tests after it."""
    items.sort(key=_uses_browser)


def _uses_browser(item: pytest.Item) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    return item.get_closest_marker("browser") is not None or bool(names & {"page", "chromium"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A redis-server of this test alone, so that it can be stopped and started again."""

    def __init__(self, workdir: Path) -> None:
        self.port = _free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(
            [*argv, "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        with redis.Redis.from_url(self.url, socket_connect_timeout=0.2) as client:
            while True:  # closed after: tests count the connections Redis has
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def model_root(tmp_path_factory: pytest.TempPathFactory, settings: Any) -> Path:
    """A model root with the tiny Llama at `local:0/tiny`, for this process and the worker."""
    root = tmp_path_factory.mktemp("models")
    make_tiny_llama(root / "tiny")
    settings.MODEL_ROOTS = [root]
    return root
