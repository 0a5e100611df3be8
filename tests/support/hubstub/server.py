"""A threaded local HTTP server answering the Hugging Face Hub routes huggingface_hub calls.

Status codes and headers follow what `huggingface_hub.utils.hf_raise_for_status` and
`file_download.get_hf_file_metadata` read: `X-Error-Code` (RepoNotFound, GatedRepo,
RevisionNotFound, EntryNotFound), `X-Error-Message`, `X-Repo-Commit`, `ETag`, `X-Linked-Etag`,
`X-Linked-Size`, RFC-style `Link: <...>; rel="next"` pagination and `RateLimit` headers on 429.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from tests.support.hubstub import search, streaming
from tests.support.hubstub.repos import RepoFile, StubRepo, load_repos

_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<rev>[^/]+))?/?$")
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)/?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
MAX_RANGE_BYTES = 64 << 20  # a GGUF header with a 150k-token vocabulary is a few MiB


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    authorized: bool  # an Authorization header was sent; the token itself is never recorded
    range: str | None = None  # the Range header, if any (a resumed download sends one)


class _Reply(Exception):
    """Raised by route code to end a request with an error status."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class HubStub:
    """Local stand-in for the Hub. `tokens` maps a valid token to the gated repos it may read."""

    def __init__(
        self,
        *,
        tokens: dict[str, set[str]] | None = None,
        page_cap: int = 1000,
        port: int = 0,
    ) -> None:
        self.repos: dict[str, StubRepo] = load_repos()
        self.tokens = tokens if tokens is not None else {}
        self.page_cap = page_cap
        self.rate_limited = False
        self.throttle_bps = 0  # whole files are sent at most this fast (0: as fast as it goes)
        self.cut_once: dict[str, int] = {}  # file name -> close the connection after N bytes, once
        self._port = port
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> HubStub:
        stub = self

        class Handler(_Handler):
            hub = stub

        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._server.daemon_threads = True
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering: the port is closed, so clients get a connection error."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:  # keep-alive connections too, or a pooled client would still get answers
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the client
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server, self._thread = None, None

    def add_repo(self, repo: StubRepo) -> StubRepo:
        self.repos[repo.repo_id] = repo
        return repo

    def take_cut(self, name: str) -> int | None:
        with self._lock:
            return self.cut_once.pop(name, None)

    def track(self, connection: socket.socket, *, open_: bool) -> None:
        with self._lock:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def count(self, path_prefix: str = "", method: str | None = None) -> int:
        return sum(
            1
            for r in self.requests
            if r.path.startswith(path_prefix) and (method is None or r.method == method)
        )

    def reset_requests(self) -> None:
        with self._lock:
            self._requests.clear()


class _Handler(BaseHTTPRequestHandler):
    hub: HubStub
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.hub.track(self.connection, open_=True)

    def finish(self) -> None:
        self.hub.track(self.connection, open_=False)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read `HubStub.requests` instead."""

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def _serve(self, *, head: bool) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        token = self._token()
        request = Request(
            self.command, parts.path, query, token is not None, self.headers.get("Range")
        )
        self.hub.record(request)
        try:
            self._route(parts.path, query, token, head=head)
        except _Reply as reply:
            self._error(reply, head=head)
        except search.BadQuery as exc:
            self._error(_Reply(400, str(exc)), head=head)

    def _token(self) -> str | None:
        value = self.headers.get("Authorization", "")
        return value.removeprefix("Bearer ").strip() or None

    def _route(
        self, path: str, query: dict[str, list[str]], token: str | None, *, head: bool
    ) -> None:
        if self.hub.rate_limited:
            raise _Reply(429, "You have exceeded our hourly quotas for action: api.", "RateLimited")
        if token is not None and token not in self.hub.tokens:
            raise _Reply(401, "Invalid credentials in Authorization header")
        if path == "/api/models":
            return self._search(query, head=head)
        if match := _TREE.match(path):
            return self._tree(match["repo"], unquote(match["rev"]), token, head=head)
        if match := _INFO.match(path):
            return self._info(match["repo"], match["rev"], query, token, head=head)
        if match := _RESOLVE.match(path):
            return self._resolve(
                match["repo"], unquote(match["rev"]), match["file"], token, head=head
            )
        raise _Reply(404, "Sorry, we can't find the page you are looking for.")

    def _repo(self, repo_id: str, token: str | None) -> StubRepo:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            # The Hub answers 401 to anonymous callers so as not to reveal private repos.
            raise _Reply(404 if token else 401, "Repository not found", "RepoNotFound")
        return repo

    def _sha(self, repo: StubRepo, revision: str | None) -> str:
        sha = repo.resolve_revision(revision)
        if sha is None:
            raise _Reply(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return sha

    def _search(self, query: dict[str, list[str]], *, head: bool) -> None:
        repos = search.matching(self.hub.repos.values(), query)
        items, next_offset = search.page_of(repos, query, page_cap=self.hub.page_cap)
        headers: dict[str, str] = {}
        if next_offset is not None:
            params = [(k, v) for k, values in query.items() if k != "cursor" for v in values]
            params.append(("cursor", search.encode_cursor(next_offset)))
            headers["Link"] = f'<{self.hub.url}/api/models?{urlencode(params)}>; rel="next"'
        self._json(200, items, headers, head=head)

    def _info(
        self,
        repo_id: str,
        revision: str | None,
        query: dict[str, list[str]],
        token: str | None,
        *,
        head: bool,
    ) -> None:
        repo = self._repo(repo_id, token)
        sha = self._sha(repo, unquote(revision) if revision else None)
        blobs = query.get("blobs", [""])[0].lower() == "true"
        body = repo.api_info(sha=sha, blobs=blobs, expand=query.get("expand", []))
        self._json(200, body, {}, head=head)

    def _tree(self, repo_id: str, revision: str, token: str | None, *, head: bool) -> None:
        """The file listing snapshot_download walks (recursive, one page)."""
        repo = self._repo(repo_id, token)
        self._sha(repo, revision)
        entries = []
        for f in repo.files.values():
            entry: dict[str, Any] = {
                "type": "file",
                "path": f.name,
                "size": f.size,
                "oid": f.etag[:40],
            }
            if f.lfs:
                entry["lfs"] = {"oid": f.etag, "size": f.size, "pointerSize": 135}
            entries.append(entry)
        self._json(200, entries, {}, head=head)

    def _resolve(
        self, repo_id: str, revision: str, filename: str, token: str | None, *, head: bool
    ) -> None:
        repo = self._repo(repo_id, token)
        sha = self._sha(repo, revision)
        self._check_gate(repo, token)
        file = repo.files.get(filename)
        if file is None:
            raise _Reply(404, "Entry not found", "EntryNotFound")
        self._file(file, sha, head=head)

    def _check_gate(self, repo: StubRepo, token: str | None) -> None:
        if not repo.gated:
            return
        if token is None:
            raise _Reply(
                401,
                f"Access to model {repo.repo_id} is restricted. You must have access to it "
                "and be authenticated to access it. Please log in.",
                "GatedRepo",
            )
        if repo.repo_id not in self.hub.tokens[token]:
            raise _Reply(
                403,
                f"Access to model {repo.repo_id} is restricted and you are not in the authorized "
                f"list. Visit https://huggingface.co/{repo.repo_id} to ask for access.",
                "GatedRepo",
            )

    def _file(self, file: RepoFile, sha: str, *, head: bool) -> None:
        headers = {"X-Repo-Commit": sha, "ETag": f'"{file.etag}"', "Accept-Ranges": "bytes"}
        if file.lfs:
            headers |= {"X-Linked-Etag": f'"{file.etag}"', "X-Linked-Size": str(file.size)}
        range_header = self.headers.get("Range")
        if head:
            self._send(200, b"", headers | {"Content-Length": str(file.size)}, head=True)
        elif file.whole:
            self._whole(file, range_header, headers)
        elif range_header:
            self._range(file, range_header, headers)
        elif file.content is not None and len(file.content) == file.size:
            self._send(200, file.content, headers, head=False)
        else:
            raise _Reply(400, "The Hub stand-in does not serve weight data; use a Range request.")

    def _range(self, file: RepoFile, range_header: str, headers: dict[str, str]) -> None:
        match = _RANGE.match(range_header.strip())
        if match is None or int(match[1]) >= file.size:
            raise _Reply(416, f"Range not satisfiable: {range_header}")
        start = int(match[1])
        end = min(int(match[2]) if match[2] else file.size - 1, file.size - 1)
        if end - start + 1 > MAX_RANGE_BYTES:
            raise _Reply(416, "The Hub stand-in serves ranges of at most 64 MiB.")
        content = file.content or b""
        body = content[start : end + 1].ljust(end - start + 1, b"\0")
        headers = headers | {"Content-Range": f"bytes {start}-{end}/{file.size}"}
        self._send(206, body, headers, head=False)

    def _whole(self, file: RepoFile, range_header: str | None, headers: dict[str, str]) -> None:
        start, end, status = 0, file.size - 1, 200
        if range_header:
            match = _RANGE.match(range_header.strip())
            if match is None or int(match[1]) >= file.size:
                raise _Reply(416, f"Range not satisfiable: {range_header}")
            start, status = int(match[1]), 206
            end = min(int(match[2]), end) if match[2] else end  # as the Hub: the range asked
            headers = headers | {"Content-Range": f"bytes {start}-{end}/{file.size}"}
        self.send_response(status)
        for key, value in (headers | {"Content-Length": str(end + 1 - start)}).items():
            self.send_header(key, value)
        self.end_headers()
        cut = self.hub.take_cut(file.name)
        streaming.send_file(self, file, start, self.hub.throttle_bps, cut, end=end + 1)

    def _json(self, status: int, body: Any, headers: dict[str, str], *, head: bool) -> None:
        payload = json.dumps(body).encode()
        self._send(status, payload, headers | {"Content-Type": "application/json"}, head=head)

    def _error(self, reply: _Reply, *, head: bool) -> None:
        # A header is printable Latin-1: what the user typed may not be (the Hub escapes it).
        headers = {"X-Error-Message": json.dumps(reply.message)[1:-1]}
        if reply.code is not None and reply.code != "RateLimited":
            headers["X-Error-Code"] = reply.code
        if reply.status == 429:
            headers |= {
                "RateLimit": '"api";r=0;t=42',
                "RateLimit-Policy": '"fixed window";"api";q=1000;w=300',
                "Retry-After": "42",
            }
        self._json(reply.status, {"error": reply.message}, headers, head=head)

    def _send(self, status: int, body: bytes, headers: dict[str, str], *, head: bool) -> None:
        self.send_response(status)
        headers.setdefault("Content-Length", str(len(body)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)
