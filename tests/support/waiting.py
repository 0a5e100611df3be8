"""The one bound on what a test waits for: a state reached by another process, an engine's
start, a page that changes on a push.

A test waits on the state itself, polling it, never for a fixed time: on an idle machine the
wait ends as soon as the state is there, and the bound only matters on a loaded one. It is
sized for a busy 2-core CI machine (a tiny engine that starts in 5 s alone took more than 10 s
there beside another test run); pytest-timeout (120 s a test, pyproject.toml) is the backstop
for a test that waits several times. A test whose legitimate work is longer (an engine start
on a Ray cluster, a download) passes its own longer bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

STATE_WAIT_S = 60.0
# Playwright's own waits (expect's default is 5 s, a page's 30 s), set once in tests/conftest.py.
BROWSER_WAIT_MS = int(STATE_WAIT_S * 1000)


def wait_for(
    predicate: Callable[[], Any], timeout_s: float = STATE_WAIT_S, interval_s: float = 0.1
) -> Any:
    """The predicate's first truthy value, polled every `interval_s`; AssertionError past
    `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)
