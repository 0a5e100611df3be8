"""GGUF repos on the Hub: one repo, many quantization files, each planned from its header.

A repo such as ``org/Model-GGUF`` holds ``Model-Q4_K_M.gguf``, ``Model-Q8_0.gguf`` and, for
big models, ``Model-Q8_0-00001-of-00003.gguf`` …: the page lists one choice per quantization
(a split model is one choice, its size the sum of its parts). The spec comes from a ranged read
of the header's first megabytes, never from the weights.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import quote

from huggingface_hub import HfApi
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from deployments.catalog.gguf_read import (
    GgufHeader,
    header_from_prefix,
    quant_from_name,
    spec_from_headers,
    split_parts,
)
from deployments.catalog.hub.errors import translate
from deployments.planning import GgufSpec

FIRST_READ_BYTES = 1 << 20  # most headers are smaller; a 150k-token vocabulary is a few MiB
MAX_HEADER_BYTES = 64 << 20
# Not a language model: vision projectors and imatrix data ship beside the quantizations.
_NOT_MODELS = ("mmproj", "imatrix")


class GgufHubError(ValueError):
    """A GGUF file on the Hub that cannot be planned; one line for the user."""


@dataclass(frozen=True, slots=True)
class GgufChoice:
    """One quantization of a GGUF repo: a single file, or the parts of a split one."""

    quant: str  # from the file name ("Q4_K_M"); the header's general.file_type confirms it
    files: tuple[str, ...]  # repo paths; llama-server is given the first
    size_bytes: int

    @property
    def first(self) -> str:
        return self.files[0]


def gguf_choices(files: Iterable[tuple[str, int | None]]) -> tuple[GgufChoice, ...]:
    """(path, size) of a repo's files → its GGUF choices, split parts grouped, by size."""
    groups: dict[str, list[tuple[int, str, int]]] = {}
    for path, size in files:
        name = path.rsplit("/", 1)[-1]
        if not name.endswith(".gguf") or name.lower().startswith(_NOT_MODELS):
            continue
        parts = split_parts(name)
        folder = path[: -len(name)]
        group = folder + parts[0] if parts else path
        groups.setdefault(group, []).append((parts[1] if parts else 1, path, size or 0))
    choices = []
    for members in groups.values():
        members.sort()
        paths = tuple(p for _, p, _ in members)
        choices.append(GgufChoice(quant_from_name(paths[0]), paths, sum(s for *_, s in members)))
    return tuple(sorted(choices, key=lambda c: (c.size_bytes, c.first)))


@dataclass(frozen=True, slots=True)
class GgufHub:
    """The Hub's GGUF files: listed with sizes, and read by range. One attempt per request, a
    timeout, errors as ``HubError``s, like ``HubClient``."""

    endpoint: str
    token: str | None = None
    timeout_s: float = 10.0

    @contextmanager
    def _errors(self, repo_id: str, revision: str, filename: str | None = None) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            error = translate(
                exc,
                repo_id=repo_id,
                revision=revision,
                endpoint=self.endpoint,
                token_sent=self.token is not None,
                filename=filename,
            )
            if error is None:
                raise
            raise error from exc

    def files(self, repo_id: str, revision: str = "main") -> list[tuple[str, int | None]]:
        """(path, size) of every file of the repo at ``revision``."""
        api = HfApi(endpoint=self.endpoint, token=False, library_name="shardboard")
        with self._errors(repo_id, revision):
            info = api.model_info(
                repo_id,
                revision=revision,
                files_metadata=True,
                timeout=self.timeout_s,
                token=self.token or False,
            )
        return [(s.rfilename, s.size) for s in info.siblings or []]

    def read_range(
        self, repo_id: str, filename: str, revision: str, *, end: int
    ) -> tuple[bytes, int]:
        """Bytes 0..end of a file and the file's full size; never the rest of it."""
        url = f"{self.endpoint}/{repo_id}/resolve/{quote(revision, safe='')}/{filename}"
        headers = build_hf_headers(token=self.token or False, library_name="shardboard")
        headers["Range"] = f"bytes=0-{end}"
        body = bytearray()
        with (
            self._errors(repo_id, revision, filename),
            get_session().stream("GET", url, headers=headers, timeout=self.timeout_s) as response,
        ):
            if response.status_code >= 400:
                response.read()
            hf_raise_for_status(response)
            # A server that ignored Range would send the whole file: stop reading at `end`.
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > end:
                    break
            total = response.headers.get("Content-Range", "").rpartition("/")[2]
            size = int(total) if total.isdigit() else int(response.headers.get("Content-Length", 0))
        return bytes(body[: end + 1]), size


def read_header(hub: GgufHub, repo_id: str, filename: str, revision: str) -> GgufHeader:
    """A file's header from ranged reads: 1 MiB first, then as much as that header says."""
    want = FIRST_READ_BYTES
    while True:
        prefix, total = hub.read_range(repo_id, filename, revision, end=want - 1)
        header = header_from_prefix(prefix, total)
        if header is not None:
            return header
        if len(prefix) < want or want >= MAX_HEADER_BYTES:
            raise GgufHubError(f"{filename}: no GGUF header in its first {len(prefix)} bytes")
        want *= 8


def hub_gguf_spec(
    hub: GgufHub, repo_id: str, choice: GgufChoice, revision: str = "main"
) -> GgufSpec:
    """The planner's spec of one quantization, from the header of each of its files."""
    headers = [read_header(hub, repo_id, path, revision) for path in choice.files]
    name = f"{repo_id.rsplit('/', 1)[-1]}:{choice.quant or choice.first}"
    return spec_from_headers(headers, name=name)
