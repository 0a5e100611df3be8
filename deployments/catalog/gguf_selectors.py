"""Reads behind the GGUF pages: local ``.gguf`` cards, a Hub repo's quantization files, the
header's architecture rows. Each returns plain values or raises ModelSourceError."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from django.conf import settings
from huggingface_hub import constants

from deployments import planning
from deployments.catalog import gguf_local
from deployments.catalog.gguf_hub import GgufChoice, GgufHub, GgufHubError, gguf_choices
from deployments.catalog.gguf_sources import GgufSource, resolve_gguf
from deployments.catalog.selectors import CatalogCard, human_bytes, session_hub_token
from deployments.catalog.sources import LOCAL_PREFIX, ModelSourceError


def gguf_hub(session: Any) -> GgufHub:
    """The Hub's GGUF files through the user's token, as the rest of the catalog does."""
    endpoint = getattr(settings, "HF_ENDPOINT", None) or constants.ENDPOINT
    token = session_hub_token(session) or getattr(settings, "HF_TOKEN", None) or None
    return GgufHub(endpoint.rstrip("/"), token)


def local_gguf_ref(model: gguf_local.LocalGguf) -> str:
    return f"{LOCAL_PREFIX}{model.root_index}/{model.relative_path}"


def local_gguf_cards() -> list[CatalogCard]:
    """Every local GGUF model as a card of the Models page's local list."""
    return [
        CatalogCard(
            name=f"{m.root_name}/{m.relative_path}",
            url=f"/models/gguf/local/{m.root_index}/{m.relative_path}/",
            parameters="—",
            size=human_bytes(m.size_bytes),
            context_length=None,
            quantization=f"GGUF {m.quant}".strip(),
            gated=False,
            license=None,
            downloads=None,
            likes=None,
            last_modified=None,
        )
        for m in gguf_local.list_local_gguf()
    ]


def local_gguf(root: int, path: str) -> gguf_local.LocalGguf | None:
    return next(
        (
            m
            for m in gguf_local.list_local_gguf()
            if (m.root_index, m.relative_path) == (root, path)
        ),
        None,
    )


@dataclass(frozen=True, slots=True)
class ChoiceRow:
    """One quantization of a Hub GGUF repo, as its page lists it."""

    quant: str
    first: str
    parts: int
    size: str
    url: str
    chosen: bool


def hub_choice_rows(
    hub: GgufHub, repo_id: str, revision: str, picked: str
) -> tuple[list[ChoiceRow], GgufChoice | None]:
    """The repo's quantizations (split files as one) and the one picked by its first file;
    a Hub failure stays a HubError, so the page answers with its status."""
    try:
        choices = gguf_choices(hub.files(repo_id, revision))
    except GgufHubError as exc:
        raise ModelSourceError(str(exc)) from exc
    if not choices:
        raise ModelSourceError(f"{repo_id} holds no GGUF model file.")
    base = f"/models/gguf/{repo_id}/"
    rows = [
        ChoiceRow(
            quant=c.quant or "?",
            first=c.first,
            parts=len(c.files),
            size=human_bytes(c.size_bytes),
            url=f"{base}?file={quote(c.first)}",
            chosen=c.first == picked,
        )
        for c in choices
    ]
    return rows, next((c for c in choices if c.first == picked), None)


def resolve(ref: str, session: Any, revision: str = "") -> tuple[GgufSource, planning.GgufSpec]:
    """A GGUF reference's source and spec (Hub reads with the user's token)."""
    hub = None if ref.startswith(LOCAL_PREFIX) else gguf_hub(session)
    return resolve_gguf(ref, hub=hub, revision=revision or "main")


def architecture_rows(spec: planning.GgufSpec) -> list[tuple[str, str]]:
    kv_heads = sorted(set(spec.head_count_kv))
    return [
        ("Architecture", spec.architecture),
        ("File type", spec.file_type or "—"),
        ("Blocks", str(spec.block_count)),
        ("Embedding", str(spec.embedding_length)),
        ("Attention heads", str(spec.head_count)),
        ("KV heads", ", ".join(str(k) for k in kv_heads)),
        ("Head dim (K, V)", f"{spec.key_length}, {spec.value_length}"),
        ("Vocabulary", str(spec.vocab_size)),
        ("Training context", f"{spec.context_length} tokens"),
        ("Tensor data", human_bytes(spec.file_tensor_bytes)),
        ("Token embedding (CPU)", human_bytes(spec.input_bytes)),
        ("Output layer (last GPU)", human_bytes(spec.output_bytes)),
    ]
