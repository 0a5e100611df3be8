"""Reads behind the Models pages: Hub search and cards, local models, a model's architecture.

The views only parse input and render; everything here returns plain values or raises one of
HubError, ModelSourceError or PlanningError, each carrying a message meant for the user.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from deployments import planning
from deployments.catalog import local
from deployments.catalog.hub import HubClient, ModelCard, ModelSummary, SearchPage
from deployments.catalog.hub.sentence_tf import spec_kwargs
from deployments.catalog.hubaccess import hub_client
from deployments.catalog.sources import ModelSource, ModelSourceError, load_spec, local_ref
from deployments.handoff import sealed
from deployments.planning.units import GIB, MIB

SESSION_TOKEN_KEY = "catalog_hub_token"  # noqa: S105 (a session key name, not a secret)


# -- display values ---------------------------------------------------------------------------


def human_params(count: int | None) -> str:
    if not count:
        return "—"
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return str(count)


def human_count(count: int) -> str:
    for unit, size in (("M", 10**6), ("k", 10**3)):
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return str(count)


def human_bytes(size: int | None) -> str:
    if not size:
        return "—"
    if size >= GIB:
        return f"{size / GIB:.1f} GiB"
    if size >= MIB:
        return f"{size / MIB:.0f} MiB"
    return f"{size / 1024:.0f} KiB"


def concurrency_text(value: float) -> str:
    """Sequences of the full context at once: whole numbers once they are large."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True, slots=True)
class CatalogCard:
    """One result card, the same for Hub and local models."""

    name: str
    url: str
    parameters: str
    size: str
    context_length: int | None
    quantization: str | None
    gated: bool
    license: str | None
    downloads: str | None
    likes: str | None
    last_modified: datetime | None
    error: str | None = None
    # Hosts whose Hub cache holds the whole model (None: not looked up, as for local models)
    on_hosts: tuple[str, ...] | None = None


def hub_card(summary: ModelSummary, on_hosts: tuple[str, ...] = ()) -> CatalogCard:
    return CatalogCard(
        name=summary.repo_id,
        url=f"/models/{summary.repo_id}/",
        parameters=human_params(summary.parameters),
        size=human_bytes(summary.weights_bytes_estimate),
        context_length=summary.context_length,
        quantization=summary.quantization,
        gated=summary.gated,
        license=summary.license,
        downloads=human_count(summary.downloads),
        likes=human_count(summary.likes),
        last_modified=summary.last_modified,
        on_hosts=on_hosts,
    )


def local_card(model: local.LocalModel) -> CatalogCard:
    return CatalogCard(
        name=f"{model.root_name}/{model.relative_path}",
        url=f"/models/local/{model.root_index}/{model.relative_path}/",
        parameters=human_params(model.parameters),
        size=human_bytes(model.size_bytes),
        context_length=model.context_length,
        quantization=model.quantization,
        gated=False,
        license=None,
        downloads=None,
        likes=None,
        last_modified=None,
        error=model.error,
    )


# -- catalog reads ----------------------------------------------------------------------------


def session_hub_token(session: Any) -> str | None:
    """The Hub token the user set on the Models page: sealed in their session (the session row
    is signed, not encrypted), opened only to make a Hub call or to seal it into a launch."""
    return sealed.unseal(session.get(SESSION_TOKEN_KEY, ""), what="a session's Hub token") or None


def keep_session_hub_token(session: Any, token: str | None) -> None:
    if token:
        session[SESSION_TOKEN_KEY] = sealed.seal(token)
    else:
        session.pop(SESSION_TOKEN_KEY, None)


def client_for(session: Any) -> HubClient:
    return hub_client(token=session_hub_token(session))


def search_models(client: HubClient, filters: dict[str, Any]) -> SearchPage:
    return client.search(**filters)


def local_models() -> list[CatalogCard]:
    return [local_card(m) for m in local.list_local()]


def spec_from_card(card: ModelCard) -> planning.ModelSpec:
    if card.config is None:
        raise ModelSourceError(card.config_error or f"{card.repo_id} has no readable config.json.")
    counts = dict(card.parameters_by_dtype)
    summary = planning.SafetensorsSummary(counts) if counts else None
    try:
        return planning.ModelSpec.from_config(
            card.config,
            safetensors=summary,
            name=card.repo_id,
            **spec_kwargs(card.sentence_transformers),
        )
    except planning.PlanningError as exc:
        raise ModelSourceError(f"{card.repo_id}: {exc}") from exc


def model_spec(source: ModelSource, client: HubClient) -> planning.ModelSpec:
    """The spec through the user's client, so a personal token reaches gated configs."""
    if source.is_local:
        return load_spec(source)
    return spec_from_card(client.model_info(source.ref, revision=source.revision or None))


def architecture_rows(spec: planning.ModelSpec) -> list[tuple[str, str]]:
    rows = [
        ("Architecture", ", ".join(spec.architectures) or spec.model_type),
        ("Layers", str(spec.num_layers)),
        ("Hidden size", str(spec.hidden_size)),
        ("Attention heads", str(spec.num_heads)),
        ("KV heads", str(spec.num_kv_heads)),
        ("Head dim", str(spec.head_dim)),
        ("Vocabulary", str(spec.vocab_size)),
        ("Max context", f"{spec.derived_max_model_len} tokens"),
        ("Checkpoint dtype", spec.dtype),
    ]
    if spec.moe is not None:
        rows.append(("Experts", f"{spec.moe.num_experts} ({spec.moe.experts_per_token} per token)"))
    if spec.mla is not None:
        rows.append(("Attention", "multi-head latent (MLA)"))
    return rows


def local_source(root: int, relative_path: str) -> ModelSource:
    from deployments.catalog.sources import resolve_source

    return resolve_source(f"local:{root}/{relative_path}")


def local_model(source: ModelSource) -> local.LocalModel | None:
    return next((m for m in local.list_local() if local_ref(m) == source.ref), None)
