#!/usr/bin/env python3
"""A fast stand-in engine: `stub_engine.py serve MODEL --host H --port P [flags]`.

It takes the argv of `transformers serve` or `vllm serve` (unknown flags are ignored), answers
/health, /v1/models and /v1/completions at once, and exits on SIGTERM. Started with
`--runner pooling` it is an embedding model as vLLM 0.33 serves one: /v1/embeddings answers
and /v1/completions is refused. `GET /stub/argv` answers the argv it was started with. Used where a test or a
bench measures the panel's own path and not a model loading. No Django, no third-party imports.

`GET /stub/env` answers the SHA-256 of the variables in REPORTED_ENV (never their values), so
a test can check what reached the engine's environment. STUB_ENGINE_READY_DELAY_S delays the
first /health 200 (a model loading); STUB_ENGINE_READY_FILE holds it until that file exists
(a test decides when loading ends); STUB_ENGINE_API_KEY is checked like vLLM's --api-key.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPORTED_ENV = ("HF_TOKEN", "CUDA_VISIBLE_DEVICES", "HF_HUB_OFFLINE", "SHARDBOARD_DEPLOYMENT_ID")
STARTED = time.monotonic()


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("command")
    parser.add_argument("model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--runner", default="auto")
    return parser.parse_known_args(argv)


def env_report() -> dict[str, str | None]:
    return {
        name: hashlib.sha256(os.environ[name].encode()).hexdigest() if name in os.environ else None
        for name in REPORTED_ENV
    }


class Handler(BaseHTTPRequestHandler):
    model_name = "stub"
    ready_delay_s = 0.0
    pooling = False
    argv: tuple[str, ...] = ()

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: the log file should show what the engine did, not each probe

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        key = os.environ.get("VLLM_API_KEY") or os.environ.get("STUB_ENGINE_API_KEY")
        return not key or self.headers.get("Authorization") == f"Bearer {key}"

    def do_GET(self) -> None:
        if self.path == "/health":
            ready = time.monotonic() - STARTED >= self.ready_delay_s
            gate = os.environ.get("STUB_ENGINE_READY_FILE")
            ready = ready and (not gate or os.path.exists(gate))
            self._send(200 if ready else 503, {})
        elif self.path == "/stub/env":
            self._send(200, env_report())
        elif self.path == "/stub/argv":
            self._send(200, {"argv": list(self.argv)})
        elif self.path == "/v1/models":
            if not self._authorized():
                self._send(401, {"error": "Unauthorized"})
                return
            self._send(200, {"object": "list", "data": [{"id": self.model_name}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        if self.path not in ("/v1/completions", "/v1/embeddings"):
            self._send(404, {"error": "not found"})
            return
        if not self._authorized():
            self._send(401, {"error": "Unauthorized"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if (self.path == "/v1/embeddings") != self.pooling:
            task = "embed" if self.pooling else "generate"
            self._send(400, {"error": {"message": f"The model does not support {self.path}: "
                                       f"runner serves {task}", "code": 400}})  # fmt: skip
        elif self.pooling:
            vector = [0.0, 0.6, 0.8]
            self._send(200, {"object": "list", "data": [{"index": 0, "embedding": vector}]})
        else:
            text = {"index": 0, "text": " 2"}
            self._send(200, {"object": "text_completion", "choices": [text]})


def main(argv: list[str]) -> None:
    args, _ = parse(argv)
    Handler.model_name = args.served_model_name or args.model
    Handler.pooling = args.runner == "pooling"
    Handler.argv = tuple(argv)
    Handler.ready_delay_s = float(os.environ.get("STUB_ENGINE_READY_DELAY_S", "0"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"stub engine serving {Handler.model_name} on {args.host}:{args.port}", flush=True)
    print("Application startup complete.", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    finally:
        print("stub engine exiting", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
