"""A Hub GGUF on this host: which repo and which of its files a llama.cpp launch needs.

A GGUF repo holds one file (or one set of split parts) per quantization, often tens of GiB
each, so the host fetches only the quantization the plan chose. The launch names it in the
row's model id as ``org/repo/<path in the repo>.gguf`` (``lifecycle.gguf_launch``); a split
model's further parts follow from the first part's name (llama.cpp's ``llama_split_path``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from deployments.catalog.gguf_read import split_parts


@dataclass(frozen=True, slots=True)
class HubGguf:
    repo_id: str
    files: tuple[str, ...]  # the first part first: llama-server's -m

    @property
    def first(self) -> str:
        return self.files[0]


def hub_gguf(model_id: str) -> HubGguf | None:
    """The repo and files of a Hub GGUF launch's model id; None for anything else."""
    org, _, rest = model_id.partition("/")
    name, _, path = rest.partition("/")
    if model_id.startswith("/") or not (org and name and path.lower().endswith(".gguf")):
        return None
    return HubGguf(f"{org}/{name}", all_parts(path))


def all_parts(path: str) -> tuple[str, ...]:
    """``a/M-00001-of-00003.gguf`` → its three parts; a single file alone."""
    split = split_parts(path)
    if split is None:
        return (path,)
    stem, _, count = split
    folder = PurePosixPath(path).parent
    names = [f"{stem}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    return tuple(str(folder / n) if str(folder) != "." else n for n in names)
