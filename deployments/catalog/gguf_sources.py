"""Where a GGUF model comes from and its ``GgufSpec``: ``local:<root>/<path>.gguf`` or a Hub
repo and one of its quantizations, ``org/Model-GGUF:Q4_K_M`` (or ``:<file path>``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deployments.catalog import gguf_local, local
from deployments.catalog.gguf_hub import (
    GgufChoice,
    GgufHub,
    GgufHubError,
    gguf_choices,
    hub_gguf_spec,
)
from deployments.catalog.gguf_read import GgufReadError
from deployments.catalog.sources import LOCAL_PREFIX, ModelSourceError, check_hub_id
from deployments.planning import GgufSpec


@dataclass(frozen=True, slots=True)
class GgufSource:
    ref: str
    engine_model: str  # llama-server's -m: an absolute local path, or the first file's repo path
    repo_id: str  # "" for a local file
    files: tuple[str, ...]  # every file the host must have (a split model's parts)
    revision: str
    is_local: bool


def is_gguf_ref(ref: str) -> bool:
    ref = ref.strip()
    return ref.lower().endswith(".gguf") or (":" in ref and not ref.startswith(LOCAL_PREFIX))


def _local(ref: str) -> tuple[GgufSource, GgufSpec]:
    root, _, relative = ref.removeprefix(LOCAL_PREFIX).partition("/")
    try:
        path = gguf_local.resolve_local_gguf(int(root) if root.isdigit() else root, relative)
        spec = gguf_local.local_spec(int(root) if root.isdigit() else root, relative)
    except local.LocalModelError as exc:
        raise ModelSourceError(str(exc)) from exc
    return GgufSource(ref, str(path), "", (str(path),), "", True), spec


def _pick(choices: tuple[GgufChoice, ...], wanted: str, repo_id: str) -> GgufChoice:
    by_file = [c for c in choices if wanted in c.files]
    by_quant = [c for c in choices if c.quant.upper() == wanted.upper()]
    if by_file or len(by_quant) == 1:
        return (by_file or by_quant)[0]
    names = ", ".join(sorted({c.quant or c.first for c in choices})) or "none"
    if by_quant:
        raise ModelSourceError(
            f"{repo_id} has several {wanted} files: name one ({', '.join(c.first for c in by_quant)})."
        )
    raise ModelSourceError(f"{repo_id} has no GGUF file {wanted!r}; it has: {names}.")


def resolve_gguf(
    ref: str, *, hub: GgufHub | None = None, revision: str = "main", token: str | None = None
) -> tuple[GgufSource, GgufSpec]:
    """The source and spec of a GGUF reference (Hub reads through ``hub``; else with `token`,
    a launcher's own for a gated repo, or this server's HF_TOKEN)."""
    ref = ref.strip()
    if ref.startswith(LOCAL_PREFIX):
        return _local(ref)
    repo_id, _, wanted = ref.partition(":")
    check_hub_id(repo_id)
    if not wanted:
        raise ModelSourceError(f"{repo_id}: name a quantization, e.g. {repo_id}:Q4_K_M.")
    from deployments.catalog.hub import HubError

    if hub is None:
        from django.conf import settings
        from huggingface_hub import constants

        endpoint = getattr(settings, "HF_ENDPOINT", None) or constants.ENDPOINT
        hub = GgufHub(endpoint.rstrip("/"), token or getattr(settings, "HF_TOKEN", None) or None)
    try:
        files = hub.files(repo_id, revision)
        choice = _pick(gguf_choices(files), wanted, repo_id)
        spec = hub_gguf_spec(hub, repo_id, choice, revision)
    except (HubError, GgufHubError, GgufReadError) as exc:
        raise ModelSourceError(str(exc)) from exc
    source = GgufSource(ref, choice.first, repo_id, choice.files, revision, False)
    return source, spec


def local_file(source: GgufSource) -> Path:
    return Path(source.engine_model)
