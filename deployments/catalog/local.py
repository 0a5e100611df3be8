"""Local models: folders holding a config.json under the configured MODEL_ROOTS.

Nothing outside the roots is ever read: every path is resolved (symlinks included) and checked
to lie inside its root before it is opened, and `..` or absolute paths are refused outright.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from deployments.catalog import modelfiles
from deployments.catalog.hub import parse


class LocalModelError(ValueError):
    """A local model path that is refused or unusable; the message is shown to the user."""


@dataclass(frozen=True, slots=True)
class LocalModel:
    root_index: int
    root_name: str
    relative_path: str  # POSIX, relative to the root; "." for the root itself
    name: str
    path: Path  # resolved, inside the root
    architecture: str | None
    model_type: str | None
    context_length: int | None
    quantization: str | None
    parameters: int | None  # from safetensors headers when present
    size_bytes: int
    error: str | None  # why the folder cannot be used (unreadable config.json, ...)


def _roots(roots: Sequence[Path | str] | None) -> list[Path]:
    if roots is None:
        from django.conf import settings  # lazy: this module is usable without Django

        roots = settings.MODEL_ROOTS
    return [Path(r).resolve() for r in roots]


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _contained(path: Path, root: Path) -> Path | None:
    """The resolved path when it exists and lies inside the root, else None."""
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a symlink loop
        return None
    return resolved if _inside(resolved, root) else None


def _pick_root(root: str | int, roots: list[Path]) -> tuple[int, Path]:
    if isinstance(root, int) or (isinstance(root, str) and root.isdigit()):
        index = int(root)
        if 0 <= index < len(roots):
            return index, roots[index]
        raise LocalModelError(f"There is no model root number {index}.")
    matches = [(i, r) for i, r in enumerate(roots) if r.name == root]
    if len(matches) != 1:
        raise LocalModelError(f"There is no single model root named {root!r}.")
    return matches[0]


def _check_relative(relative_path: str) -> PurePosixPath:
    if "\0" in relative_path:
        raise LocalModelError("The path contains a NUL byte.")
    posix = PurePosixPath(relative_path.replace("\\", "/"))
    if posix.is_absolute() or PureWindowsPath(relative_path).drive:
        raise LocalModelError(
            f"{relative_path!r} is absolute: give a path relative to a model root."
        )
    if ".." in posix.parts:
        raise LocalModelError(
            f"{relative_path!r} contains '..': paths must stay inside a model root."
        )
    return posix


def resolve_local(
    root: str | int, relative_path: str, *, roots: Sequence[Path | str] | None = None
) -> Path:
    """The resolved folder of a local model; refuses anything that leads outside its root."""
    _, base = _pick_root(root, _roots(roots))
    relative = _check_relative(relative_path)
    candidate = base.joinpath(*relative.parts)
    if not candidate.exists() and not candidate.is_symlink():
        raise LocalModelError(f"No folder {relative_path!r} in model root {base.name!r}.")
    resolved = _contained(candidate, base)
    if resolved is None:
        raise LocalModelError(
            f"{relative_path!r} leads outside model root {base.name!r} (through a symbolic link)."
        )
    if not resolved.is_dir() or _contained(resolved / "config.json", base) is None:
        raise LocalModelError(f"{relative_path!r} is not a model folder: it has no config.json.")
    return resolved


def read_config(folder: Path, root: Path) -> dict[str, Any]:
    """config.json of a model folder; the file (or its link target) must lie inside the root."""
    path = _contained(folder / "config.json", root)
    if path is None or not path.is_file():
        raise LocalModelError(f"{folder.name}: config.json is missing or leads outside the root.")
    try:
        return modelfiles.read_config(path)
    except modelfiles.ModelFilesError as exc:  # the page names the folder, not the server's path
        why = str(exc).replace(f"{path}: ", "config.json: ")
        raise LocalModelError(f"{folder.name}: {why}") from exc


def _safetensors_parameters(path: Path) -> Counter[str]:
    try:
        header = modelfiles.read_header(path)
    except modelfiles.ModelFilesError as exc:
        raise LocalModelError(f"{path.name}: unreadable safetensors header ({exc}).") from exc
    counts: Counter[str] = Counter()
    for _, dtype, elements in modelfiles.tensor_entries(header):
        counts[dtype] += elements
    return counts


def _files(folder: Path, root: Path) -> Iterator[tuple[Path, Path]]:
    """(path, resolved) of the files under a model folder, skipping links that leave the root."""
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for filename in filenames:
            resolved = _contained(Path(dirpath) / filename, root)
            if resolved is not None and resolved.is_file():
                yield Path(dirpath) / filename, resolved


def _describe(index: int, root: Path, folder: Path) -> LocalModel:
    config = read_config(folder, root)
    files = list(_files(folder, root))
    params: Counter[str] = Counter()
    for path, resolved in files:
        if path.suffix == ".safetensors" and path.parent == folder:
            params.update(_safetensors_parameters(resolved))
    relative = folder.relative_to(root).as_posix()
    return LocalModel(
        root_index=index,
        root_name=root.name,
        relative_path=relative,
        name=folder.name if relative != "." else root.name,
        path=folder.resolve(),
        architecture=parse.architecture(config),
        model_type=config.get("model_type"),
        context_length=parse.context_length(config),
        quantization=parse.quantization(config),
        parameters=sum(params.values()) or None,
        size_bytes=sum(resolved.stat().st_size for resolved in {r for _, r in files}),
        error=None,
    )


def _broken(index: int, root: Path, folder: Path, error: LocalModelError) -> LocalModel:
    relative = folder.relative_to(root).as_posix()
    return LocalModel(
        index,
        root.name,
        relative,
        folder.name,
        folder.resolve(),
        None,
        None,
        None,
        None,
        None,
        0,
        error=str(error),
    )


def _model_folders(root: Path, max_depth: int) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        depth = len(Path(dirpath).relative_to(root).parts)
        dirnames[:] = [d for d in dirnames if not d.startswith(".")] if depth < max_depth else []
        if "config.json" in filenames:
            yield Path(dirpath)


def list_local(
    roots: Sequence[Path | str] | None = None, *, max_depth: int = 4
) -> tuple[LocalModel, ...]:
    """Every folder under the roots that holds a readable config.json, sorted by root and path."""
    found: list[LocalModel] = []
    for index, root in enumerate(_roots(roots)):
        if not root.is_dir():
            continue
        for folder in _model_folders(root, max_depth):
            if _contained(folder / "config.json", root) is None:
                continue  # config.json links outside the root: not ours to read
            try:
                found.append(_describe(index, root, folder))
            except LocalModelError as exc:
                found.append(_broken(index, root, folder, exc))
    return tuple(sorted(found, key=lambda m: (m.root_index, m.relative_path)))


# The same containment rules for GGUF files (catalog.gguf_local).
roots = _roots
pick_root = _pick_root
check_relative = _check_relative
contained = _contained
