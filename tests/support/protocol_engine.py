"""A stand-in for vLLM 0.33's Responses, Anthropic Messages and embeddings endpoints.

vLLM cannot run on these machines; this answers the four paths the gateway relays as vLLM 0.33
does (paths and files below are inside the vllm-0.33.0 wheel), so that the OpenAI and Anthropic
SDKs can be pointed at the gateway in the tests. Standard library only, one thread per request.

- POST /v1/responses: vllm/entrypoints/openai/responses/api_router.py:48-77. A whole answer is
  the response object; a stream is `event: <type>` + `data: <json>` per event (lines 34-45),
  response.created ... response.output_text.delta ... response.completed (its response carries
  `usage` {input_tokens, output_tokens, total_tokens}); no `[DONE]`. Kept by id for
  GET /v1/responses/{id} and POST /v1/responses/{id}/cancel (lines 80-124).
- POST /v1/messages: vllm/entrypoints/anthropic/api_router.py:49-82 and serving.py:918-1228:
  message_start (usage of the prompt), content_block_start, content_block_delta (text_delta),
  content_block_stop, message_delta (stop_reason and usage), message_stop, each as
  `event: <type>` + `data:` (serving.py:154-155); no `[DONE]`.
- POST /v1/messages/count_tokens: serving.py:1249-1282 → {"input_tokens", "context_management"}.
- POST /v1/embeddings: vllm/entrypoints/pooling/embed/protocol.py:174-186 → {"object": "list",
  "data": [{"index", "object": "embedding", "embedding"}], "usage": {prompt_tokens,
  total_tokens}}; `encoding_format` "base64" is float32 bytes, base64 (the OpenAI SDK's default).
- Errors: OpenAI's {"error": {message, type, code}}; on the Anthropic paths
  {"type": "error", "error": {type, message}} (api_router.py:40-48).

A prompt's tokens are its words; the answer is `tokens` words "w0 w1 ..." (at most max_tokens).
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EMBEDDING_SIZE = 8


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class ProtocolEngine:
    api_key: str | None = None
    tokens: int = 5
    interval_s: float = 0.0
    model: str = "stand-in"
    break_after: int | None = None  # events sent before the engine hangs up mid-stream
    seen: list[Seen] = field(default_factory=list)
    kept: dict[str, dict[str, Any]] = field(default_factory=dict)
    _server: ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def start(self) -> ProtocolEngine:
        engine = self

        class Handler(_Handler):
            owner = engine

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def words(value: Any) -> int:
    """The stand-in's token count of a prompt: its words, wherever they are in the JSON."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(words(v) for v in value)
    if isinstance(value, dict):
        return sum(words(v) for k, v in value.items() if k in ("content", "text", "input"))
    return 0


class _Handler(BaseHTTPRequestHandler):
    owner: ProtocolEngine
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each event leaves at once, as from a real engine

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(200, {})
            return
        self._seen({})
        if not self._authorized():
            return
        path = self.path.split("?", 1)[0]
        if path.startswith("/v1/responses/"):
            kept = self.owner.kept.get(path.rsplit("/", 1)[1])
            if kept is None:
                self._json(404, _openai_error(404, "Response not found"))
            elif "stream=true" in self.path:  # its events again (serving.py retrieve_responses)
                event = {"type": "response.completed", "sequence_number": 0, "response": kept}
                self._stream([("response.completed", event)])
            else:
                self._json(200, kept)
            return
        self._json(404, _openai_error(404, "Not Found"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self._seen(body)
        if not self._authorized():
            return
        route = {
            "/v1/responses": self._responses,
            "/v1/messages": self._messages,
            "/v1/messages/count_tokens": self._count_tokens,
            "/v1/embeddings": self._embeddings,
        }.get(self.path)
        if route is not None:
            route(body)
        elif self.path.startswith("/v1/responses/") and self.path.endswith("/cancel"):
            self._cancel(self.path.split("/")[3])
        else:
            self._json(404, _openai_error(404, "Not Found"))

    def _seen(self, body: dict[str, Any]) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.owner.seen.append(Seen(self.command, self.path, headers, body))

    def _authorized(self) -> bool:
        """vLLM's --api-key: 401 {"error": "Unauthorized"} (serve/middleware/authenticate.py)."""
        key = self.owner.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    # --- the answers ------------------------------------------------------------------------

    def _answer(self, max_tokens: Any) -> list[str]:
        n = (
            self.owner.tokens
            if not isinstance(max_tokens, int)
            else min(max_tokens, self.owner.tokens)
        )
        return [f"w{i} " for i in range(n)]

    def _responses(self, body: dict[str, Any]) -> None:
        rid = f"resp_{uuid.uuid4().hex}"
        pieces = self._answer(body.get("max_output_tokens"))
        prompt = words(body.get("input")) + words(body.get("instructions"))
        usage = {
            "input_tokens": prompt,
            "output_tokens": len(pieces),
            "total_tokens": prompt + len(pieces),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
        done = _response(rid, self.owner.model, "completed", "".join(pieces), usage)
        self.owner.kept[rid] = done
        if not body.get("stream"):
            self._json(200, done)
            return
        started = _response(rid, self.owner.model, "in_progress", None, None)
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"response": started}),
            ("response.in_progress", {"response": started}),
        ]
        item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress"}
        events.append(("response.output_item.added", {"output_index": 0, "item": item}))
        for piece in pieces:
            delta = {"item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": piece}
            events.append(("response.output_text.delta", {**delta, "logprobs": []}))
        events.append(("response.completed", {"response": done}))
        self._stream(
            [
                (kind, {"type": kind, "sequence_number": i, **data})
                for i, (kind, data) in enumerate(events)
            ]
        )

    def _cancel(self, rid: str) -> None:
        kept = self.owner.kept.get(rid)
        if kept is None:
            self._json(404, _openai_error(404, f"Response with id '{rid}' not found."))
            return
        kept["status"] = "cancelled"
        self._json(200, kept)

    def _messages(self, body: dict[str, Any]) -> None:
        if not isinstance(body.get("max_tokens"), int):
            self._json(400, _anthropic_error(400, "max_tokens: Field required"))
            return
        pieces = self._answer(body["max_tokens"])
        prompt = words(body.get("messages")) + words(body.get("system"))
        mid = f"chatcmpl-{uuid.uuid4().hex}"  # vLLM reuses the chat completion's id (serving.py)
        stop = "max_tokens" if len(pieces) == body["max_tokens"] else "end_turn"
        if not body.get("stream"):
            self._json(
                200,
                {
                    "id": mid,
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "text", "text": "".join(pieces)}],
                    "model": self.owner.model,
                    "stop_reason": stop,
                    "usage": {"input_tokens": prompt, "output_tokens": len(pieces)},
                },
            )
            return
        start = {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.owner.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": 0},
        }
        events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": start})]
        block = {"type": "text", "text": ""}
        events.append(("content_block_start", {"index": 0, "content_block": block}))
        for piece in pieces:
            delta = {"type": "text_delta", "text": piece}
            events.append(("content_block_delta", {"index": 0, "delta": delta}))
        events.append(("content_block_stop", {"index": 0}))
        usage = {"input_tokens": prompt, "output_tokens": len(pieces)}
        stop_delta = {"stop_reason": stop, "stop_sequence": None}
        events.append(("message_delta", {"delta": stop_delta, "usage": usage}))
        events.append(("message_stop", {}))
        self._stream([(kind, {"type": kind, **data}) for kind, data in events])

    def _count_tokens(self, body: dict[str, Any]) -> None:
        n = words(body.get("messages")) + words(body.get("system"))
        self._json(200, {"input_tokens": n, "context_management": {"original_input_tokens": n}})

    def _embeddings(self, body: dict[str, Any]) -> None:
        texts = body.get("input")
        items = [texts] if isinstance(texts, str) else list(texts or [])
        data = []
        for i, text in enumerate(items):
            vector = [((len(str(text)) + i + k) % 7) / 7 for k in range(EMBEDDING_SIZE)]
            encoded: Any = vector
            if body.get("encoding_format") == "base64":
                packed = struct.pack(f"<{len(vector)}f", *vector)
                encoded = base64.b64encode(packed).decode()
            data.append({"index": i, "object": "embedding", "embedding": encoded})
        prompt = sum(words(t) if isinstance(t, str) else len(t) for t in items)
        usage = {"prompt_tokens": prompt, "total_tokens": prompt, "completion_tokens": 0}
        self._json(
            200,
            {
                "id": f"embd-{uuid.uuid4().hex}",
                "object": "list",
                "created": int(time.time()),
                "model": self.owner.model,
                "data": data,
                "usage": usage,
            },
        )

    # --- the wire ---------------------------------------------------------------------------

    def _json(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _stream(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i, (kind, data) in enumerate(events):
            if i == self.owner.break_after:  # dies: no last chunk, the connection cut
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            frame = f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            self.wfile.flush()
            if self.owner.interval_s:
                time.sleep(self.owner.interval_s)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _response(
    rid: str, model: str, status: str, text: str | None, usage: dict[str, Any] | None
) -> dict[str, Any]:
    output = []
    if text is not None:
        content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        output.append(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": content,
            }
        )
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
        "error": None,
        "incomplete_details": None,
    }


def _openai_error(status: int, message: str) -> dict[str, Any]:
    """vLLM's ErrorResponse (vllm/entrypoints/serve/engine/protocol.py)."""
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _anthropic_error(status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
