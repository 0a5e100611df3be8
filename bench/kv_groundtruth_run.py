"""One start of the real CPU vLLM for bench/kv_groundtruth.py: ``vllm serve`` with an explicit KV
space and max-model-len, eager, read until it has logged its KV sizing (or died), then one short
completion on request, then stopped (its whole process group). Lines read are vLLM 0.32's own
(source at each pattern, vllm/…)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

START_TIMEOUT_S = 420  # a loaded 2-core machine; a start takes ~50 s alone
# v1/core/kv_cache_utils.py:2327 "%s KV cache size: %s tokens, Maximum concurrency for %s …"
_TOKENS = re.compile(
    r"(?P<pool>CPU|GPU) KV cache size: (?P<n>[\d,]+) tokens, Maximum concurrency for "
    r"(?P<len>[\d,]+) tokens per request: (?P<c>[\d.]+)x"
)
_GROUPS = re.compile(r"kv cache group sizes \((?P<g>[\d, ]*)\)")  # kv_cache_utils.py:853
_LCM = re.compile(r"kv lcm block sizes (?P<n>\d+)")  # kv_cache_utils.py:854
# platforms/interface.py:1096 and :1120 (hybrid models: attention block raised, state padded)
_ATTN_BLOCK = re.compile(r"Setting attention block size to (?P<n>\d+) tokens")
_PADDING = re.compile(r"Padding mamba page size by (?P<p>[\d.]+)%")
# kv_cache_utils.py:1484 "Add %d padding layers, may waste at most %.2f%% KV cache memory"
_PAD_LAYERS = re.compile(r"Add (?P<n>\d+) padding layers")
_EXPLICIT = re.compile(r"Explicitly set \((?P<gib>[\d.]+)/[\d.]+\) GiB for KV cache")  # cpu_worker
_VERSION = re.compile(r"vLLM server version (?P<v>[\w.+-]+)|V1 LLM engine \(v(?P<v2>[\w.+-]+)\)")
_ERROR = re.compile(r"\b(?P<e>(?:[A-Z]\w*Error|NotImplementedError|Exception): .+)$")
_HYBRID_OFF = "Hybrid KV cache manager is disabled"


@dataclass
class Start:
    """What one start logged; ``error`` is vLLM's own line when it refused."""

    version: str = ""
    kv_tokens: int | None = None
    concurrency: float | None = None
    group_block_sizes: list[int] = field(default_factory=list)
    lcm_block_size: int | None = None
    attention_block_size: int | None = None
    mamba_padding_percent: float | None = None
    padding_layers: int | None = None
    hybrid_manager_off: bool = False
    explicit_kv_gib: float | None = None
    error: str = ""
    rss_mib: int = 0  # the process tree's resident memory once the KV cache was allocated
    first_request: str = ""  # "ok", or the error the server answered with
    seconds: float = 0.0


def read_log(text: str) -> Start:
    s = Start()
    for line in text.splitlines():
        if not s.version and (m := _VERSION.search(line)):
            s.version = m["v"] or m["v2"]
        if s.kv_tokens is None and (m := _TOKENS.search(line)):
            s.kv_tokens, s.concurrency = int(m["n"].replace(",", "")), float(m["c"])
        if not s.group_block_sizes and (m := _GROUPS.search(line)):
            s.group_block_sizes = [int(x) for x in m["g"].replace(" ", "").split(",") if x]
        if s.lcm_block_size is None and (m := _LCM.search(line)):
            s.lcm_block_size = int(m["n"])
        if s.attention_block_size is None and (m := _ATTN_BLOCK.search(line)):
            s.attention_block_size = int(m["n"])
        if s.mamba_padding_percent is None and (m := _PADDING.search(line)):
            s.mamba_padding_percent = float(m["p"])
        if s.padding_layers is None and (m := _PAD_LAYERS.search(line)):
            s.padding_layers = int(m["n"])
        if s.explicit_kv_gib is None and (m := _EXPLICIT.search(line)):
            s.explicit_kv_gib = float(m["gib"])
        s.hybrid_manager_off = s.hybrid_manager_off or _HYBRID_OFF in line
        # a refusal comes before the sizing line; errors after it are the server's shutdown
        sized = s.kv_tokens is not None
        if not (s.error or sized) and " WARNING " not in line and (m := _ERROR.search(line)):
            s.error = m["e"].strip()[:400]
    return s


def _tree_rss_mib(pid: int) -> int:
    """Resident memory of the start's process group (the API server, engine core, worker)."""
    pids = subprocess.run(
        ["pgrep", "-g", str(pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    rss = subprocess.run(
        ["ps", "-o", "rss=", "-p", ",".join(pids or [str(pid)])],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    return sum(int(x) for x in rss) // 1024


def _ask(port: int, model: str) -> str:
    body = json.dumps({"model": model, "prompt": "1 + 1 =", "max_tokens": 4}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=body,
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return "ok" if resp.status == 200 else f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:300]}"
    except (urllib.error.URLError, TimeoutError) as exc:
        return f"no answer: {exc}"


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, TimeoutError, ConnectionError):
        return False


def start(
    vllm: str,
    model: Path,
    *,
    kv_bytes: int,
    max_len: int,
    port: int,
    log: Path,
    ask: bool,
    env: dict[str, str] | None = None,
) -> Start:
    """One start; ``ask``: wait until it serves and send one completion; ``env``: added to
    the engine's environment."""
    argv = [
        vllm, "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", model.name, "--enforce-eager",
        "--kv-cache-memory-bytes", str(kv_bytes), "--max-model-len", str(max_len),
    ]  # fmt: skip
    began = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    try:
        s, rss = _wait_sizing(proc, log, began)
        answer = ""
        if ask and s.kv_tokens is not None and not s.error:
            answer = _first_request(proc, port, model.name, began)
            s = read_log(log.read_text(errors="replace"))
        s.rss_mib, s.first_request = rss, answer
    finally:
        _stop(proc)
    s.seconds = round(time.monotonic() - began, 1)
    return s


def _wait_sizing(proc: subprocess.Popen[bytes], log: Path, began: float) -> tuple[Start, int]:
    rss = 0
    while time.monotonic() - began < START_TIMEOUT_S:
        text = log.read_text(errors="replace")
        s = read_log(text)
        if proc.poll() is None:
            rss = max(rss, _tree_rss_mib(proc.pid))
        # core.py:402 "init engine (profile, create kv cache, warmup model) took": sized
        if "init engine (profile" in text or s.error or proc.poll() is not None:
            time.sleep(2)  # the lines that follow the sizing (and a traceback's last line)
            return read_log(log.read_text(errors="replace")), rss
        time.sleep(2)
    s = read_log(log.read_text(errors="replace"))
    s.error = s.error or f"no KV sizing logged within {START_TIMEOUT_S} s"
    return s, rss


def _first_request(proc: subprocess.Popen[bytes], port: int, model: str, began: float) -> str:
    while time.monotonic() - began < START_TIMEOUT_S and proc.poll() is None:
        if _ready(port):
            return _ask(port, model)
        time.sleep(2)
    return "the server exited before serving" if proc.poll() is not None else "not ready in time"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the start's whole process group, SIGKILL to what is left after 20 s (the
    engine core and worker may outlive the API server)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (proc.poll() is None or _group_alive(proc.pid)):
        time.sleep(1)
    if _group_alive(proc.pid):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _group_alive(pgid: int) -> bool:
    found = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, check=False)
    return bool(found.stdout.strip())


def as_dict(s: Start) -> dict[str, object]:
    return asdict(s)
