"""Shared fixtures: personas, a real ASGI server, a real browser, a real Celery host worker."""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deployments.catalog.demo_model import make_tiny_llama
from tests.support import reaper
from tests.support.browser import CHROMIUM, sync_calls_beside_playwright
from tests.support.live_server import (
    LiveServer,
    close_sync_thread_connections,
    start_server,
    stop_server,
)
from tests.support.personas import make_user
from tests.support.private_redis import PrivateRedis
from tests.support.waiting import BROWSER_WAIT_MS
from tests.support.workers import WorkerProcess, spawn_worker


@pytest.fixture(autouse=True)
def no_engine_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that starts engines leaves none running: they are killed after it, with a warning
    naming the test (torn down last, after the test's own workers and deployments)."""
    yield
    node = request.node
    if node.get_closest_marker("engine") or node.get_closest_marker("worker"):
        if pids := reaper.reap(node.nodeid):
            warnings.warn(f"{node.nodeid} left engines running: killed {pids}", stacklevel=1)


@pytest.fixture(autouse=True)
def no_connection_left_in_the_sync_thread() -> Iterator[None]:
    """An async test's database connections close with it, wherever they were opened."""
    yield
    close_sync_thread_connections()


@pytest.fixture
def viewer(db: None) -> Any:
    return make_user("vera-viewer", "viewer")


@pytest.fixture
def operator(db: None) -> Any:
    return make_user("otto-operator", "operator")


@pytest.fixture
def admin_user(db: None) -> Any:
    return make_user("ada-admin", "admin")


@pytest.fixture
def outsider(db: None) -> Any:
    return make_user("olga-outsider", None)


@pytest.fixture
def asgi_server(transactional_db: None, settings: Any) -> Iterator[LiveServer]:
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
    box = {"proc": start_server()}
    port = box["proc"].port.value

    def restart() -> None:
        stop_server(box["proc"])
        box["proc"] = start_server(port)

    yield LiveServer(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}", restart)
    stop_server(box["proc"])


# --- a real browser ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: scripts/setup.sh --test installs Debian's chromium")
    from playwright.sync_api import expect, sync_playwright

    # Every Playwright wait of every test gets the one bound of tests/support/waiting.py:
    # expect()'s own default (5 s) fails a page that is merely slow on a loaded machine.
    expect.set_options(timeout=BROWSER_WAIT_MS)

    # Playwright's sync API keeps an event loop on this thread; the ORM calls that tests make
    # between browser steps are still plain synchronous calls.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as pw, sync_calls_beside_playwright():
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
    context.set_default_timeout(BROWSER_WAIT_MS)  # page waits, navigations included
    tab = context.new_page()
    yield tab
    context.close()


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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--part",
        choices=("all", "engines", "rest"),
        default="all",
        help="engines: only the tests that start host workers or engines; rest: the others. "
        "scripts/test.sh runs the two side by side, each on its own Redis, database and var dir.",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Browser tests last: Playwright's sync API leaves an event loop on the main thread,
    which would stop pytest-asyncio from running the async tests after it."""
    if (part := config.getoption("part")) != "all":
        wanted = part == "engines"
        if dropped := [item for item in items if _starts_engines(item) != wanted]:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if _starts_engines(item) == wanted]
    items.sort(key=_uses_browser)


def _starts_engines(item: pytest.Item) -> bool:
    """The tests that start host workers, engines or a Ray cluster: most of the suite's time
    and CPU (docs/performance.md), run one after another in their own part."""
    if any(item.get_closest_marker(m) for m in ("engine", "worker", "ray")):
        return True
    return "host_worker" in set(getattr(item, "fixturenames", ()))


def _uses_browser(item: pytest.Item) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    return item.get_closest_marker("browser") is not None or bool(names & {"page", "chromium"})


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("hf-home")
    (home / "hub").mkdir()
    return home


@pytest.fixture
def model_root(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, settings: Any) -> Path:
    """A model root with the tiny Llama at `local:0/tiny`, for this process and the worker."""
    root = tmp_path_factory.mktemp("models")
    shutil.copytree(tiny_model, root / "tiny")
    settings.MODEL_ROOTS = [root]
    return root
