"""Where a model comes from (a local folder under MODEL_ROOTS, or the Hub) and its ModelSpec."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from deployments.catalog import local
from deployments.planning import ModelSpec, PlanningError, SafetensorsSummary

LOCAL_PREFIX = "local:"
# What git accepts as a ref name (check-ref-format), less its rarer corners; a commit id fits.
_REVISION = re.compile(r"(?!-)(?!.*\.\.)(?!.*@\{)[^\x00-\x20\x7f~^:?*\[\\]{1,200}")


class ModelSourceError(ValueError):
    """The model cannot be found or read; the message is for the user."""


@dataclass(frozen=True, slots=True)
class ModelSource:
    ref: str  # what the user chose: "local:<root>/<path>" or a Hub id
    engine_model: str  # what the engine is given: an absolute folder or the Hub id
    revision: str
    is_local: bool


def resolve_source(ref: str, revision: str = "") -> ModelSource:
    ref = ref.strip()
    if not ref:
        raise ModelSourceError("Choose a model.")
    if ref.startswith(LOCAL_PREFIX):
        root, _, relative = ref.removeprefix(LOCAL_PREFIX).partition("/")
        try:
            folder = local.resolve_local(int(root) if root.isdigit() else root, relative or ".")
        except local.LocalModelError as exc:
            raise ModelSourceError(str(exc)) from exc
        return ModelSource(ref, str(folder), "", True)
    if ref.startswith(("/", ".")) or ".." in ref or ref.count("/") != 1:
        raise ModelSourceError(f"{ref!r} is not a Hub id like 'org/name' nor a local model.")
    check_hub_id(ref)
    revision = revision.strip()
    if revision and not _REVISION.fullmatch(revision):
        raise ModelSourceError(
            f"Revision {revision!r} is not a branch, tag or commit id: no spaces or control "
            "characters, none of ~ ^ : ? * [ \\, no '..' or '@{', not starting with '-'."
        )
    return ModelSource(ref, ref, revision, False)


def check_hub_id(ref: str) -> None:
    """The Hub's own rules for a repo id, checked here: huggingface_hub raises on a bad one
    deep inside a request, where it would surface as a server error."""
    try:
        validate_repo_id(ref)
    except HFValidationError:
        raise ModelSourceError(
            f"{ref!r} is not a Hub id: use 'org/name' with letters, digits, '-', '_' and '.', "
            "neither part starting or ending with '-' or '.', no '--' or '..', at most 96 "
            "characters."
        ) from None


def local_ref(model: local.LocalModel) -> str:
    return f"{LOCAL_PREFIX}{model.root_index}/{model.relative_path}"


def load_spec(source: ModelSource, *, token: str | None = None) -> ModelSpec:
    """The planner's ModelSpec; Hub data through the hub client (the user's token, if given)."""
    if source.is_local:
        return _local_spec(Path(source.engine_model))
    from deployments.catalog.hub import HubError
    from deployments.catalog.hubaccess import hub_client

    try:
        card = hub_client(token).model_info(source.ref, revision=source.revision or None)
    except HubError as exc:
        raise ModelSourceError(str(exc)) from exc
    if card.config is None and card.gated and not token:
        raise ModelSourceError(
            f"{source.ref} is gated: the engine could not download it. Set your own Hub token "
            "(Models page, 'Hub token') with access to it, then launch again; it is used for "
            "this launch and given to the engine only."
        )
    if card.config is None:
        raise ModelSourceError(card.config_error or f"{source.ref} has no readable config.json.")
    summary = (
        SafetensorsSummary(dict(card.parameters_by_dtype)) if card.parameters_by_dtype else None
    )
    return _spec(card.config, summary, source.ref, card.sentence_transformers)


def _local_spec(folder: Path) -> ModelSpec:
    from deployments.catalog.modelfiles import ModelFilesError, folder_spec

    try:
        return folder_spec(folder)
    except ModelFilesError as exc:
        raise ModelSourceError(str(exc)) from exc
    except PlanningError as exc:
        raise ModelSourceError(f"{folder.name}: {exc}") from exc


def _spec(
    config: dict[str, Any],
    summary: SafetensorsSummary | None,
    name: str,
    sentence_transformers: dict[str, Any] | None = None,
) -> ModelSpec:
    from deployments.catalog.hub.sentence_tf import spec_kwargs

    try:
        return ModelSpec.from_config(
            config, safetensors=summary, name=name, **spec_kwargs(sentence_transformers)
        )
    except PlanningError as exc:
        raise ModelSourceError(f"{name}: {exc}") from exc


def model_roots() -> list[Path]:
    return list(settings.MODEL_ROOTS)
