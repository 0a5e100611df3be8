#!/usr/bin/env python3
"""A stand-in for `vllm serve` (vLLM 0.33.0) with a FIXED service capacity, so queueing is real.

`vllm_standin.py serve MODEL --host H --port P [--max-num-seqs N] [vllm flags]`. Other vLLM
flags are accepted and ignored. Standard library only, like stub_engine.py; no Django.

What it follows (vLLM 0.33.0 wheel, paths inside it):
- /health 200 with an empty body (entrypoints/serve/instrumentator/health.py:22-33).
- --api-key (or VLLM_API_KEY) guards only paths under /v1, /v2, /inference, /cohere with
  `Authorization: Bearer`; anything else is open; a miss is 401 {"error": "Unauthorized"}
  (entrypoints/serve/middleware/authenticate.py:11,55-60).
- The socket is bound before the model loads but not listened on, so a client sees
  "connection refused" while loading (entrypoints/launchers/launcher.py:355-399).
- /metrics: Prometheus text, every engine series labelled model_name and engine="0"
  (v1/metrics/loggers.py:499-505); counters carry `_total`; histogram buckets are vLLM's
  defaults (v1/metrics/buckets.py:57-104); vllm:engine_sleep_state has a sleep_state label
  awake | weights_offloaded | discard_all (loggers.py:593-614, 1335-1352).
- With VLLM_SERVER_DEV_MODE=1 only (entrypoints/launchers/api_server/routers.py:46-49):
  POST /sleep?level=0..2&mode=abort|wait|keep answers {"status": "sleeping", "level": L};
  POST /wake_up?tags=… answers {"status": "awake"|"sleeping", "tags": tags|null}; tags
  "weights" and "kv_cache" wake one allocation each, "scheduling" resumes a level 0 sleep,
  no tags wakes all (entrypoints/serve/dev/sleep/api_router.py:26-61; v1/engine/core.py:
  993-1080). While asleep requests are accepted and wait (core.py:998-999).
- Streaming: `data: <json>\\n\\n` events ending with `data: [DONE]`; with
  stream_options.include_usage a last chunk with `choices: []` and usage.

Capacity: at most --max-num-seqs sequences decode at once; each sequence makes one token per
VLLM_STANDIN_TOKEN_S seconds (default 0.02) whatever the batch, after a prefill of
VLLM_STANDIN_PREFILL_S_PER_TOKEN per prompt token. Beyond capacity requests wait in FIFO
order and their time to first token grows. KV-cache usage is the running sequences' tokens
over VLLM_STANDIN_KV_TOKENS (default max-num-seqs × 512). VLLM_STANDIN_SLEEP_S and
VLLM_STANDIN_WAKE_S are the times sleep and wake take; VLLM_STANDIN_READY_DELAY_S is the
model load before the socket listens.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

VERSION = "0.33.0"
GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)  # fmt: skip
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog")


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("command")
    parser.add_argument("model")
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104 - vLLM binds all by default
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--api-key", nargs="+", default=None)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-model-len", type=int, default=4096)
    args, _ignored = parser.parse_known_args(argv)
    return args


class Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1


class Engine:
    """The scheduler: FIFO admission into a fixed number of decode slots, and sleep state."""

    def __init__(self, *, model: str, max_num_seqs: int, max_model_len: int) -> None:
        self.model = model
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.token_s = _env_float("VLLM_STANDIN_TOKEN_S", 0.02)
        self.prefill_s_per_token = _env_float("VLLM_STANDIN_PREFILL_S_PER_TOKEN", 0.0)
        self.kv_tokens = int(_env_float("VLLM_STANDIN_KV_TOKENS", max_num_seqs * 512))
        self.cond = threading.Condition()
        self.waiting: deque[object] = deque()
        self.running = 0
        self.kv_in_use = 0
        self.paused = False
        self.offloaded: set[str] = set()  # "weights", "kv_cache" while asleep at level >= 1
        self.sleep_level = 0
        self.epoch = 0  # bumped by an abort-mode sleep: requests of an older epoch end
        self.hist = {
            "time_to_first_token_seconds": Histogram(TTFT_BUCKETS),
            "inter_token_latency_seconds": Histogram(ITL_BUCKETS),
            "request_time_per_output_token_seconds": Histogram(ITL_BUCKETS),
            "e2e_request_latency_seconds": Histogram(LATENCY_BUCKETS),
            "request_queue_time_seconds": Histogram(LATENCY_BUCKETS),
        }
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}

    def admit(self, ticket: object) -> int:
        """Wait for a slot in arrival order; returns the epoch the request runs in."""
        with self.cond:
            self.waiting.append(ticket)
            self.cond.wait_for(
                lambda: (
                    not self.paused
                    and self.waiting[0] is ticket
                    and self.running < self.max_num_seqs
                )
            )
            self.waiting.popleft()
            self.running += 1
            self.cond.notify_all()
            return self.epoch

    def step_allowed(self, epoch: int) -> bool:
        """False when an abort-mode sleep ended this request; waits while paused (keep)."""
        with self.cond:
            self.cond.wait_for(lambda: not self.paused or self.epoch != epoch)
            return self.epoch == epoch

    def use_kv(self, tokens: int) -> None:
        with self.cond:
            self.kv_in_use += tokens

    def release(self, *, kv_tokens: int, reason: str) -> None:
        with self.cond:
            self.running -= 1
            self.kv_in_use -= kv_tokens
            self.finished[reason] = self.finished.get(reason, 0) + 1
            self.cond.notify_all()

    def sleep(self, *, level: int, mode: str) -> None:
        with self.cond:
            self.paused = True
            if mode == "abort":
                self.epoch += 1
            self.cond.notify_all()
            if mode == "wait":
                self.cond.wait_for(lambda: self.running == 0)
        time.sleep(_env_float("VLLM_STANDIN_SLEEP_S", 0.0) if level >= 1 else 0.0)
        with self.cond:
            self.sleep_level = level
            if level >= 1:
                self.offloaded = {"weights", "kv_cache"}

    def wake_up(self, tags: list[str] | None) -> bool:
        wanted = {"weights", "kv_cache"} if tags is None else set(tags) - {"scheduling"}
        if wanted & self.offloaded:
            time.sleep(_env_float("VLLM_STANDIN_WAKE_S", 0.0))
        with self.cond:
            self.offloaded -= wanted
            fully_awake = not self.offloaded
            if fully_awake:
                self.paused = False
                self.sleep_level = 0
                self.cond.notify_all()
            return fully_awake

    def is_sleeping(self) -> bool:
        with self.cond:
            return self.paused or bool(self.offloaded)


def render_metrics(engine: Engine) -> str:
    labels = f'model_name="{engine.model}",engine="0"'
    with engine.cond:
        gauges = {
            "num_requests_running": engine.running,
            "num_requests_waiting": len(engine.waiting),
            "kv_cache_usage_perc": min(1.0, engine.kv_in_use / max(1, engine.kv_tokens)),
        }
        asleep = engine.paused or bool(engine.offloaded)
        level = engine.sleep_level if asleep else 0
        lines: list[str] = []
        for name, value in gauges.items():
            lines += [f"# TYPE vllm:{name} gauge", f"vllm:{name}{{{labels}}} {float(value)}"]
        states = {"awake": int(not asleep), "weights_offloaded": int(asleep and level == 1),
                  "discard_all": int(asleep and level == 2)}  # fmt: skip
        lines.append("# TYPE vllm:engine_sleep_state gauge")
        for state, value in states.items():
            lines.append(f'vllm:engine_sleep_state{{{labels},sleep_state="{state}"}} {value}.0')
        for name, total in (("prompt_tokens", engine.prompt_tokens),
                            ("generation_tokens", engine.generation_tokens)):  # fmt: skip
            lines += [f"# TYPE vllm:{name} counter", f"vllm:{name}_total{{{labels}}} {total}.0"]
        lines.append("# TYPE vllm:request_success counter")
        for reason, count in engine.finished.items():
            lines.append(
                f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} {count}.0'
            )
        for name, hist in engine.hist.items():
            lines += _histogram_lines(f"vllm:{name}", labels, hist)
    return "\n".join(lines) + "\n"


def _histogram_lines(name: str, labels: str, hist: Histogram) -> list[str]:
    lines = [f"# TYPE {name} histogram"]
    for bound, count in zip(hist.buckets, hist.counts, strict=True):
        lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {count}.0')
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {hist.total}.0')
    lines.append(f"{name}_count{{{labels}}} {hist.total}.0")
    lines.append(f"{name}_sum{{{labels}}} {hist.sum}")
    return lines


def _prompt_tokens(body: dict[str, Any]) -> int:
    if "messages" in body:
        text = " ".join(str(m.get("content", "")) for m in body["messages"])
    else:
        prompt = body.get("prompt", "")
        text = " ".join(map(str, prompt)) if isinstance(prompt, list) else str(prompt)
    return max(1, len(text.split()))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine: Engine
    api_keys: tuple[str, ...] = ()
    dev_mode = False

    def log_message(self, format: str, *args: Any) -> None:
        return  # the log should show what the engine did, not each probe

    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _guarded(self, path: str) -> bool:
        """True when the request was refused (vLLM's AuthenticationMiddleware)."""
        if not self.api_keys or not path.startswith(GUARDED_PREFIX):
            return False
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and token in self.api_keys:
            return False
        self._send(401, {"error": "Unauthorized"})
        return True

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if self._guarded(url.path):
            return
        if url.path == "/health":
            self._send(200, "", "text/plain")
        elif url.path == "/version":
            self._send(200, {"version": VERSION})
        elif url.path == "/metrics":
            self._send(200, render_metrics(self.engine), "text/plain; version=0.0.4")
        elif url.path == "/v1/models":
            model = {"id": self.engine.model, "object": "model", "created": int(time.time()),
                     "owned_by": "vllm", "root": self.engine.model, "parent": None,
                     "max_model_len": self.engine.max_model_len, "permission": []}  # fmt: skip
            self._send(200, {"object": "list", "data": [model]})
        elif url.path == "/is_sleeping" and self.dev_mode:
            self._send(200, {"is_sleeping": self.engine.is_sleeping()})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self._guarded(url.path):
            return
        query = parse_qs(url.query)
        if url.path == "/sleep" and self.dev_mode:
            level, mode = int(query.get("level", ["1"])[0]), query.get("mode", ["abort"])[0]
            if not 0 <= level <= 2 or mode not in ("abort", "wait", "keep"):
                self._send(422, {"detail": "level must be 0..2, mode abort|wait|keep"})
                return
            self.engine.sleep(level=level, mode=mode)
            self._send(200, {"status": "sleeping", "level": level})
        elif url.path == "/wake_up" and self.dev_mode:
            tags = query.get("tags") or None
            awake = self.engine.wake_up(tags)
            self._send(200, {"status": "awake" if awake else "sleeping", "tags": tags})
        elif url.path in ("/v1/completions", "/v1/chat/completions"):
            self._generate(json.loads(body or b"{}"), chat=url.path.endswith("chat/completions"))
        else:
            self._send(404, {"detail": "Not Found"})

    def _generate(self, body: dict[str, Any], *, chat: bool) -> None:
        engine, arrived = self.engine, time.monotonic()
        prompt_tokens = _prompt_tokens(body)
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        if prompt_tokens + max_tokens > engine.max_model_len:
            message = (f"This model's maximum context length is {engine.max_model_len} tokens. "
                       f"However, you requested {prompt_tokens + max_tokens} tokens.")  # fmt: skip
            error = {"message": message, "type": "BadRequestError", "param": None, "code": 400}
            self._send(400, {"error": error})
            return
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-{os.urandom(8).hex()}"
        stream = bool(body.get("stream"))
        epoch = engine.admit(object())
        admitted = time.monotonic()
        engine.use_kv(prompt_tokens)
        kv, reason, texts = prompt_tokens, "length", []
        try:
            if stream:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
            time.sleep(prompt_tokens * engine.prefill_s_per_token)
            last = first = 0.0
            for i in range(max_tokens):
                time.sleep(engine.token_s)
                if not engine.step_allowed(epoch):
                    reason = "abort"
                    break
                now = time.monotonic()
                if i == 0:
                    first = now
                    engine.hist["time_to_first_token_seconds"].observe(now - arrived)
                else:
                    engine.hist["inter_token_latency_seconds"].observe(now - last)
                last = now
                engine.use_kv(1)
                kv += 1
                texts.append(" " + WORDS[i % len(WORDS)])
                if stream:
                    self._event(self._chunk_body(request_id, body, texts[-1], chat, None))
            self._finish(body, request_id, chat, stream, texts, prompt_tokens, reason)
            done = time.monotonic()
            engine.hist["e2e_request_latency_seconds"].observe(done - arrived)
            engine.hist["request_queue_time_seconds"].observe(admitted - arrived)
            if len(texts) > 1:
                tpot = (last - first) / (len(texts) - 1)
                engine.hist["request_time_per_output_token_seconds"].observe(tpot)
            with engine.cond:
                engine.prompt_tokens += prompt_tokens
                engine.generation_tokens += len(texts)
        finally:
            engine.release(kv_tokens=kv, reason=reason)

    def _event(self, payload: dict[str, Any] | str) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self._chunk(f"data: {data}\n\n".encode())

    def _chunk_body(
        self, rid: str, body: dict[str, Any], text: str, chat: bool, reason: str | None
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "finish_reason": reason, "logprobs": None}
        if chat:
            choice["delta"] = {"role": "assistant", "content": text} if text else {}
        else:
            choice["text"] = text
        kind = "chat.completion.chunk" if chat else "text_completion"
        return {"id": rid, "object": kind, "created": int(time.time()),
                "model": self.engine.model, "choices": [choice]}  # fmt: skip

    def _finish(self, body: dict[str, Any], rid: str, chat: bool, stream: bool,
                texts: list[str], prompt_tokens: int, reason: str) -> None:  # fmt: skip
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(texts),
                 "total_tokens": prompt_tokens + len(texts)}  # fmt: skip
        if stream:
            self._event(self._chunk_body(rid, body, "", chat, reason))
            if (body.get("stream_options") or {}).get("include_usage"):
                last = self._chunk_body(rid, body, "", chat, None) | {"choices": [], "usage": usage}
                self._event(last)
            self._event("[DONE]")
            self._chunk(b"")
            return
        text = "".join(texts)
        choice: dict[str, Any] = {"index": 0, "finish_reason": reason, "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        self._send(200, {"id": rid, "object": "chat.completion" if chat else "text_completion",
                         "created": int(time.time()), "model": self.engine.model,
                         "choices": [choice], "usage": usage})  # fmt: skip


def main(argv: list[str]) -> None:
    args = parse(argv)
    served = (args.served_model_name or [args.model])[0]
    Handler.engine = Engine(
        model=served, max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len
    )
    keys = args.api_key or ([os.environ["VLLM_API_KEY"]] if os.environ.get("VLLM_API_KEY") else [])
    Handler.api_keys = tuple(keys)
    Handler.dev_mode = os.environ.get("VLLM_SERVER_DEV_MODE", "0") == "1"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"vLLM server version {VERSION}, serving model {served}", flush=True)
    server = ThreadingHTTPServer((args.host, args.port), Handler, bind_and_activate=False)
    server.daemon_threads = True
    server.request_queue_size = 1024
    server.server_bind()  # bound now, refused until the "model" has loaded, as vLLM does
    time.sleep(_env_float("VLLM_STANDIN_READY_DELAY_S", 0.0))
    server.server_activate()
    print(f"Starting vLLM server on http://{args.host}:{args.port}", flush=True)
    print("Application startup complete.", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    finally:
        print("vLLM stand-in exiting", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
