"""Local GGUF models: ``.gguf`` files under MODEL_ROOTS, split parts counted as one model.

Same containment rules as ``local`` (folders with config.json): every path is resolved and
must lie inside its root; ``..`` and absolute paths are refused.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from deployments.catalog import local
from deployments.catalog.gguf_read import GgufReadError, local_gguf_spec, quant_from_name
from deployments.catalog.gguf_read import split_parts as split_of
from deployments.planning import GgufSpec

_NOT_MODELS = ("mmproj", "imatrix")


@dataclass(frozen=True, slots=True)
class LocalGguf:
    root_index: int
    root_name: str
    relative_path: str  # POSIX, of the file llama-server is given (a split model's first part)
    name: str
    quant: str  # from the file name; the header's file type is in the spec
    parts: int
    size_bytes: int  # all parts


def _gguf_files(root: Path, max_depth: int) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        depth = len(Path(dirpath).relative_to(root).parts)
        dirnames[:] = [d for d in dirnames if not d.startswith(".")] if depth < max_depth else []
        for filename in filenames:
            lowered = filename.lower()
            if lowered.endswith(".gguf") and not lowered.startswith((*_NOT_MODELS, ".")):
                yield Path(dirpath) / filename


def _describe(index: int, root: Path, path: Path) -> LocalGguf | None:
    parts = split_of(path.name)
    if parts is not None and parts[1] != 1:
        return None  # counted with its first part
    count = parts[2] if parts else 1
    files = [path]
    if parts is not None:
        files = [
            path.with_name(f"{parts[0]}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)
        ]
    resolved = [local.contained(f, root) for f in files]
    sizes = [r.stat().st_size for r in resolved if r is not None and r.is_file()]
    return LocalGguf(
        root_index=index,
        root_name=root.name,
        relative_path=path.relative_to(root).as_posix(),
        name=parts[0] if parts else path.stem,
        quant=quant_from_name(path.name),
        parts=count,
        size_bytes=sum(sizes),
    )


def list_local_gguf(
    roots: Sequence[Path | str] | None = None, *, max_depth: int = 4
) -> tuple[LocalGguf, ...]:
    """Every GGUF model under the roots, sorted by root and path."""
    found: list[LocalGguf] = []
    for index, root in enumerate(local.roots(roots)):
        if not root.is_dir():
            continue
        for path in _gguf_files(root, max_depth):
            if local.contained(path, root) is None:
                continue  # a link that leaves the root: not ours to read
            model = _describe(index, root, path)
            if model is not None:
                found.append(model)
    return tuple(sorted(found, key=lambda m: (m.root_index, m.relative_path)))


def resolve_local_gguf(
    root: str | int, relative_path: str, *, roots: Sequence[Path | str] | None = None
) -> Path:
    """The resolved ``.gguf`` file; refuses anything that leads outside its root."""
    _, base = local.pick_root(root, local.roots(roots))
    relative = local.check_relative(relative_path)
    candidate = base.joinpath(*relative.parts)
    resolved = local.contained(candidate, base)
    if resolved is None:
        raise local.LocalModelError(f"No GGUF file {relative_path!r} in model root {base.name!r}.")
    if not resolved.is_file() or resolved.suffix.lower() != ".gguf":
        raise local.LocalModelError(f"{relative_path!r} is not a .gguf file.")
    return resolved


def local_spec(
    root: str | int, relative_path: str, *, roots: Sequence[Path | str] | None = None
) -> GgufSpec:
    path = resolve_local_gguf(root, relative_path, roots=roots)
    try:
        return local_gguf_spec(path)
    except GgufReadError as exc:
        raise local.LocalModelError(str(exc)) from None
