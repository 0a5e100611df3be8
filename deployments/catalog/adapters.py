"""LoRA adapters in the catalog: folders holding an adapter_config.json under the model roots,
and Hub repos holding one. Each is read from its config and its safetensors header alone (base
model, rank, alpha, target modules, tensor shapes, size): no weight is read.

A source is what the catalog names, never a path a user typed: ``local:<root>/<path>`` is
resolved inside its root with the local models' own rules (no absolute path, no ``..``, no
symbolic link out of the root), a Hub id is checked as the Hub checks one. The host worker
resolves the same source again against its own roots, or fetches the Hub repo's two files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from deployments.catalog import local, modelfiles
from deployments.catalog.sources import LOCAL_PREFIX, ModelSourceError, check_hub_id
from deployments.planning import AdapterError, AdapterSpec, AdapterTensor, adapter_spec

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"


class AdapterSourceError(ValueError):
    """The adapter cannot be found or read; the message is for the user."""


@dataclass(frozen=True, slots=True)
class AdapterSource:
    ref: str  # "local:<root>/<path>" or a Hub id
    revision: str  # the Hub commit it was read at ("" for a local folder)
    spec: AdapterSpec

    @property
    def is_local(self) -> bool:
        return self.ref.startswith(LOCAL_PREFIX)


@dataclass(frozen=True, slots=True)
class LocalAdapter:
    ref: str
    name: str
    spec: AdapterSpec | None
    error: str | None  # why the folder cannot be used


def read_adapter(ref: str, revision: str = "", *, token: str | None = None) -> AdapterSource:
    """The adapter `ref` names, read from its config and header; AdapterSourceError says why not."""
    ref = ref.strip()
    if not ref:
        raise AdapterSourceError("Choose an adapter: local:<root>/<path> or a Hub id.")
    if ref.startswith(LOCAL_PREFIX):
        return AdapterSource(ref, "", _read_folder(resolve_local_adapter(ref)))
    if ref.startswith(("/", ".")) or ".." in ref or ref.count("/") != 1:
        raise AdapterSourceError(
            f"{ref!r} is not a Hub id like 'org/name' nor a local adapter (local:<root>/<path>)."
        )
    try:
        check_hub_id(ref)
    except ModelSourceError as exc:
        raise AdapterSourceError(str(exc)) from None
    return _read_hub(ref, revision.strip(), token)


def resolve_local_adapter(ref: str, *, roots: Sequence[Path | str] | None = None) -> Path:
    """The adapter folder of ``local:<root>/<path>``, inside its root; AdapterSourceError
    otherwise. The host worker calls this too, with its own roots."""
    root, _, relative = ref.removeprefix(LOCAL_PREFIX).partition("/")
    try:
        _, base = local.pick_root(root, local.roots(roots))
        parts = local.check_relative(relative or ".").parts
    except local.LocalModelError as exc:
        raise AdapterSourceError(str(exc)) from None
    folder = local.contained(base.joinpath(*parts), base)
    if folder is None or not folder.is_dir():
        raise AdapterSourceError(
            f"No adapter folder {relative!r} in model root {base.name!r} (or it leads outside)."
        )
    for name in (CONFIG, WEIGHTS):
        if local.contained(folder / name, base) is None:
            raise AdapterSourceError(f"{relative!r} is not a LoRA adapter folder: no {name}.")
    return folder


def _read_folder(folder: Path) -> AdapterSpec:
    try:
        config = modelfiles.read_config_like(folder / CONFIG)
        header = modelfiles.read_header(folder / WEIGHTS)
    except modelfiles.ModelFilesError as exc:
        raise AdapterSourceError(str(exc).replace(f"{folder}/", f"{folder.name}/")) from None
    tensors, size = _tensors(header)
    return _spec(folder.name, config, tensors, size)


def _tensors(header: dict[str, object]) -> tuple[list[AdapterTensor], int]:
    tensors, size = [], 0
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        tensors.append(AdapterTensor(name, tuple(int(n) for n in info.get("shape") or ())))
        start, end = info.get("data_offsets") or (0, 0)
        size += int(end) - int(start)
    return tensors, size


def _spec(
    name: str, config: dict[str, object], tensors: list[AdapterTensor], size: int
) -> AdapterSpec:
    try:
        return adapter_spec(config, tensors, size)
    except AdapterError as exc:
        raise AdapterSourceError(f"{name}: {exc}") from None


def _read_hub(repo_id: str, revision: str, token: str | None) -> AdapterSource:
    from deployments.catalog.hub import HubError
    from deployments.catalog.hub.adapter_files import adapter_files
    from deployments.catalog.hubaccess import hub_client

    try:
        config, header, sha = adapter_files(hub_client(token), repo_id, revision or None, token)
    except HubError as exc:
        raise AdapterSourceError(f"{repo_id}: {exc}") from None
    tensors = [AdapterTensor(n, shape) for n, (shape, _) in header.items()]
    size = sum(n for _, n in header.values())
    return AdapterSource(repo_id, sha, _spec(repo_id, config, tensors, size))


def list_local_adapters(
    roots: Sequence[Path | str] | None = None, *, max_depth: int = 4
) -> tuple[LocalAdapter, ...]:
    """Every folder under the roots that holds an adapter_config.json, by root and path."""
    found = []
    for index, root in enumerate(local.roots(roots)):
        if not root.is_dir():
            continue
        for folder in _adapter_folders(root, max_depth):
            relative = folder.relative_to(root).as_posix()
            ref = f"{LOCAL_PREFIX}{index}/{relative}"
            try:
                spec = _read_folder(resolve_local_adapter(ref, roots=roots))
            except AdapterSourceError as exc:
                found.append(LocalAdapter(ref, folder.name, None, str(exc)))
            else:
                found.append(LocalAdapter(ref, folder.name, spec, None))
    return tuple(sorted(found, key=lambda a: a.ref))


def _adapter_folders(root: Path, max_depth: int) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        depth = len(Path(dirpath).relative_to(root).parts)
        dirnames[:] = [d for d in dirnames if not d.startswith(".")] if depth < max_depth else []
        if CONFIG in filenames:
            yield Path(dirpath)
