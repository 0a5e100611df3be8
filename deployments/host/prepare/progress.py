"""What an engine script's output says about how far it got (pure: lines in, state out).

The scripts (scripts/llama.sh, vllm.sh, transformers.sh) print three kinds of lines:

- ``==> Building llama-server (…)``: a new step (lib.sh's `say`), in bold;
- ``  [ 45%] llama-server``: cmake's own step count of the build, as a percentage;
- ``  [12/146] numpy`` or ``  [12/?] torch``: the packages pip has reached, of how many (``?``:
  pip does not know yet);

and ``shardboard: …`` (lib.sh's `die`) as the reason when one fails.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

TAIL_LINES = 15
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STEP = re.compile(r"^==> (?P<text>.+)$")
_PERCENT = re.compile(r"^\s*\[\s*(?P<pct>\d{1,3})%\]")
_COUNT = re.compile(r"^\s*\[(?P<done>\d+)/(?P<total>\d+|\?)\]\s*(?P<name>\S*)")
_FAILURE = re.compile(r"^shardboard: (?P<reason>.+)$")


def clean(line: str) -> str:
    return _ANSI.sub("", line).rstrip()


@dataclass(slots=True)
class Progress:
    """One preparation as its script's lines tell it."""

    phase: str = ""
    done: int = 0
    total: int = 0  # 0: not known
    unit: str = ""
    failure: str = ""
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))

    def feed(self, raw: str) -> bool:
        """Take one line; True when the phase or the progress changed."""
        line = clean(raw)
        if not line:
            return False
        self.tail.append(line)
        if match := _STEP.match(line):
            self.phase, self.done, self.total, self.unit = match["text"], 0, 0, ""
            return True
        if match := _PERCENT.match(line):
            return self._move(min(int(match["pct"]), 100), 100, "%")
        if match := _COUNT.match(line):
            total = 0 if match["total"] == "?" else int(match["total"])
            return self._move(int(match["done"]), total, "packages")
        if match := _FAILURE.match(line):
            self.failure = match["reason"]
        return False

    def _move(self, done: int, total: int, unit: str) -> bool:
        changed = (done, total, unit) != (self.done, self.total, self.unit)
        self.done, self.total, self.unit = done, total, unit
        return changed

    def reason(self, returncode: int) -> str:
        """Why the script failed: its own last word, else its last line."""
        if self.failure:
            return self.failure
        last = self.tail[-1] if self.tail else ""
        return f"the script ended with status {returncode}" + (f": {last}" if last else "")
