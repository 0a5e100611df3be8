"""An engine's raw output → the lines people may see: whole lines, no escapes, no secrets,
no line longer than MAX_LINE_CHARS. Pure: bytes in, text out."""

from __future__ import annotations

import re
from collections.abc import Iterable

from deployments.engines.base import MASK

MAX_LINE_CHARS = 4000  # vLLM's one-line engine config is about 3000 characters
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_MIN_SECRET_CHARS = 6  # shorter values would mask ordinary words
# Shapes of secrets whatever their value: Hub tokens, bearer headers, key flags and variables.
_PATTERNS = (
    re.compile(r"()\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{6,}"),
    re.compile(r"(--(?:api-key|hf-token|token)(?:=|\s+))\S+"),
    re.compile(
        r"(?i)(\b(?:HF_TOKEN|HUGGING_FACE_HUB_TOKEN|HUGGINGFACE_HUB_TOKEN|VLLM_API_KEY|API_KEY)"
        r"[\"']?\s*[=:]\s*[\"']?)[^\s\"',]+"
    ),
)


class Masker:
    """Replaces the given secret values, and anything shaped like a secret, with MASK."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        values = {s for s in secrets if s and len(s) >= _MIN_SECRET_CHARS}
        self._secrets = sorted(values, key=len, reverse=True)  # longest first: no partial leak

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        for pattern in _PATTERNS:
            text = pattern.sub(lambda m: m.group(1) + MASK, text)
        return text


def clean_line(raw: bytes, mask: Masker, limit: int = MAX_LINE_CHARS) -> str:
    """One line as a terminal would show it, masked before it is cut (a cut secret would leak)."""
    text = raw.decode("utf-8", errors="replace")
    text = _ANSI.sub("", text)
    if "\r" in text:  # progress bars redraw the line: keep what was drawn last
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    text = mask(_CONTROL.sub("", text.replace("\t", "    ")))
    if len(text) > limit:
        text = f"{text[:limit]} … [{len(text) - limit} more characters]"
    return text


def clean_text(text: str, mask: Masker, limit: int = MAX_LINE_CHARS) -> str:
    return "\n".join(clean_line(line.encode(), mask, limit) for line in text.splitlines())


# Where LineSplitter cuts an endless line: at least 2 × MAX_LINE_CHARS characters even in
# 4-byte UTF-8, so a secret cut in two there lies beyond what clean_line keeps.
MAX_LINE_BYTES = 8 * MAX_LINE_CHARS


class LineSplitter:
    """Bytes as they are read → whole lines. A line longer than `max_line_bytes` is cut there
    and the rest of it dropped, so one endless line cannot hold memory or the lines after it."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self._pending = bytearray()
        self._dropping = 0  # bytes of an over-long line dropped so far; 0: not dropping

    @property
    def pending_bytes(self) -> int:
        """Bytes read but not yet part of a whole line (re-read after a worker restart)."""
        return len(self._pending)

    def feed(self, data: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            chunk = data[start:] if end < 0 else data[start:end]
            self._add(chunk, lines)
            if end < 0:
                break
            lines.append(self._take())
            start = end + 1
        return lines

    def flush(self) -> list[bytes]:
        """The last line when the output ends without a newline."""
        return [self._take()] if self._pending or self._dropping else []

    def _add(self, chunk: bytes, lines: list[bytes]) -> None:
        if self._dropping:
            self._dropping += len(chunk)
            return
        room = self.max_line_bytes - len(self._pending)
        self._pending += chunk[:room]
        if len(chunk) > room:
            self._dropping = len(chunk) - room

    def _take(self) -> bytes:
        line = bytes(self._pending)
        if self._dropping:
            line += f" … [{self._dropping} more bytes]".encode()
        self._pending.clear()
        self._dropping = 0
        return line
