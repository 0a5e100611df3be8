"""HubClient: search, model info and config.json from the Hugging Face Hub, cached, offline-aware.

Every request goes through huggingface_hub (its shared httpx client, headers, error mapping and
`HfApi`), but never through its retrying helpers: `list_models` and a failed `hf_hub_download`
retry network errors and 429s with back-off for up to ~25 s, far too long for a page that
searches as one types. One attempt, a timeout, then the cache decides.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from huggingface_hub import HfApi, constants
from huggingface_hub.hf_api import ModelInfo
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from deployments import planning
from deployments.catalog.hub import infos as infos_mod
from deployments.catalog.hub import parse
from deployments.catalog.hub.cache import (
    CachePolicy,
    ConfigStore,
    Entry,
    MemoryConfigStore,
    MemoryTtlStore,
    TtlStore,
    key,
    token_scope,
)
from deployments.catalog.hub.cards import (
    Freshness,
    ModelCard,
    ModelSummary,
    Quantization,
    SearchPage,
    SearchQuery,
    Sort,
    card_from_data,
    summary_from_data,
    to_data,
)
from deployments.catalog.hub.errors import (
    HubEntryNotFoundError,
    HubGatedError,
    HubUnavailableError,
    offline_error,
    translate,
)
from deployments.catalog.hub.sentence_tf import sentence_transformers

logger = logging.getLogger(__name__)

_SHA = re.compile(r"^[0-9a-f]{40}$")
_HUB_SORT = {"downloads": "downloads", "likes": "likes", "trending": "trendingScore"}
_HUB_SORT |= {"updated": "lastModified"}
_SEARCH_EXPAND = (
    "author",
    "config",
    "downloads",
    "gated",
    "lastModified",
    "library_name",
    "likes",
    "pipeline_tag",
    "safetensors",
    "sha",
    "tags",
    "trendingScore",
)
_INDEX = "model.safetensors.index.json"
_HF_QUANT = "hf_quant_config.json"
_LIBRARY = "shardboard"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class HubClient:
    def __init__(
        self,
        *,
        endpoint: str | None = None,
        token: str | None = None,
        cache: TtlStore | None = None,
        config_store: ConfigStore | None = None,
        policy: CachePolicy | None = None,
        timeout_s: float = 10.0,
        max_scan: int = 500,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        hub = endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
        self.endpoint = hub.rstrip("/")
        self._token = token or None
        self._cache: TtlStore = cache if cache is not None else MemoryTtlStore()
        self._configs: ConfigStore = (
            config_store if config_store is not None else MemoryConfigStore()
        )
        self._policy = policy or CachePolicy()
        self._timeout_s = timeout_s
        self._max_scan = max_scan
        self._clock = clock
        self._api = HfApi(endpoint=self.endpoint, token=False, library_name=_LIBRARY)

    def __repr__(self) -> str:  # never show the token
        return f"HubClient(endpoint={self.endpoint!r}, token={'set' if self._token else 'none'})"

    # -- public API -------------------------------------------------------------------------

    def search(
        self,
        query: str = "",
        *,
        sort: Sort = "downloads",
        min_params: int | None = None,
        max_params: int | None = None,
        quantization: Quantization = "any",
        license: str | None = None,
        gated: bool | None = None,
        page: int = 1,
        page_size: int = 20,
        token: str | None = None,
    ) -> SearchPage:
        """Text-generation models vLLM can serve (GGUF-only repos left out), one page."""
        q = SearchQuery(
            query.strip(),
            sort,
            min_params,
            max_params,
            quantization,
            license,
            gated,
            page,
            page_size,
        )
        tok = self._tok(token)
        cache_key = key("search", token_scope(tok), self.endpoint, to_data(q))
        data, freshness = self._through_cache(
            cache_key,
            self._policy.search_fresh_s,
            lambda: self._fetch_search(q, tok),
            "this search",
        )
        items = tuple(self._with_context(summary_from_data(item)) for item in data["items"])
        return SearchPage(q, items, bool(data["has_next"]), freshness)

    def model_info(
        self, repo_id: str, revision: str | None = None, *, token: str | None = None
    ) -> ModelCard:
        tok = self._tok(token)
        cache_key = key("info", token_scope(tok), self.endpoint, repo_id, revision or "main")
        data, freshness = self._through_cache(
            cache_key,
            self._policy.info_fresh_s,
            lambda: self._fetch_card(repo_id, revision, tok),
            repo_id,
        )
        return card_from_data(data, freshness)

    def config(
        self, repo_id: str, revision: str | None = None, *, token: str | None = None
    ) -> dict[str, Any]:
        """config.json at a revision, from the config store when that commit was seen before."""
        tok = self._tok(token)
        offline = constants.is_offline_mode()
        sha = self._known_sha(repo_id, revision, tok, any_age=offline)
        if sha is not None and (stored := self._configs.get(repo_id, sha)) is not None:
            return stored
        if offline:
            raise offline_error(f"config.json of {repo_id}")
        try:
            return self._config_from_hub(repo_id, revision or "main", tok)
        except HubUnavailableError:
            stale = self._known_sha(repo_id, revision, tok, any_age=True)
            if stale is None or (stored := self._configs.get(repo_id, stale)) is None:
                raise
            logger.info("Hub unavailable: serving stored config.json of %s@%s", repo_id, stale)
            return stored

    # -- cache ------------------------------------------------------------------------------

    def _tok(self, token: str | None) -> str | None:
        return token or self._token

    def _through_cache(
        self, cache_key: str, fresh_s: int, fetch: Callable[[], Any], what: str
    ) -> tuple[Any, Freshness]:
        entry = Entry.from_value(self._cache.get(cache_key))
        now = self._clock()
        if constants.is_offline_mode():
            if entry is None:
                raise offline_error(what)
            return entry.data, Freshness(from_cache=True, cached_at=entry.cached_at, offline=True)
        if entry is not None and entry.age(now) < timedelta(seconds=fresh_s):
            return entry.data, Freshness(from_cache=True, cached_at=entry.cached_at)
        try:
            data = fetch()
        except HubUnavailableError as exc:
            if entry is None:
                raise
            logger.info(
                "Hub unavailable (%s): serving %s cached at %s", exc.code, what, entry.cached_at
            )
            return entry.data, Freshness(from_cache=True, cached_at=entry.cached_at, offline=True)
        self._cache.set(cache_key, Entry(data, now).to_value(), self._policy.keep_s)
        return data, Freshness(from_cache=False, cached_at=now)

    def _known_sha(
        self, repo_id: str, revision: str | None, token: str | None, *, any_age: bool
    ) -> str | None:
        if revision is not None and _SHA.fullmatch(revision):
            return revision
        cache_key = key("info", token_scope(token), self.endpoint, repo_id, revision or "main")
        entry = Entry.from_value(self._cache.get(cache_key))
        if entry is None:
            return None
        if not any_age and entry.age(self._clock()) >= timedelta(seconds=self._policy.info_fresh_s):
            return None
        return str(entry.data["sha"])

    def _with_context(self, summary: ModelSummary) -> ModelSummary:
        if summary.context_length is not None or summary.sha is None:
            return summary
        stored = self._configs.get(summary.repo_id, summary.sha)
        return replace(summary, context_length=parse.context_length(stored)) if stored else summary

    # -- Hub calls --------------------------------------------------------------------------

    @contextmanager
    def _hub_errors(
        self,
        *,
        token: str | None,
        repo_id: str | None = None,
        revision: str | None = None,
        filename: str | None = None,
    ) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            error = translate(
                exc,
                repo_id=repo_id,
                revision=revision,
                endpoint=self.endpoint,
                token_sent=token is not None,
                filename=filename,
            )
            if error is None:
                raise
            raise error from exc

    def _headers(self, token: str | None) -> dict[str, str]:
        return build_hf_headers(token=token or False, library_name=_LIBRARY)

    def _get(self, url: str, token: str | None, params: Any = None) -> Any:
        response = get_session().get(
            url, params=params, headers=self._headers(token), timeout=self._timeout_s
        )
        hf_raise_for_status(response)
        return response

    def _search_pages(
        self, params: list[tuple[str, str]], token: str | None
    ) -> Iterator[tuple[list[dict[str, Any]], bool]]:
        """Pages of /api/models, following the Link header; yields (items, more pages exist)."""
        url: str | None = f"{self.endpoint}/api/models"
        page_params: list[tuple[str, str]] | None = params
        while url is not None:
            with self._hub_errors(token=token):
                response = self._get(url, token, page_params)
            url, page_params = response.links.get("next", {}).get("url"), None
            yield response.json(), url is not None

    def _search_params(self, q: SearchQuery, limit: int) -> list[tuple[str, str]]:
        params = [("pipeline_tag", "text-generation"), ("sort", _HUB_SORT[q.sort])]
        params += [("limit", str(limit))] + [("expand", e) for e in _SEARCH_EXPAND]
        if q.query:
            params.append(("search", q.query))
        if (size := parse.num_parameters_filter(q.min_params, q.max_params)) is not None:
            params.append(("num_parameters", size))
        if q.gated is not None:
            params.append(("gated", "true" if q.gated else "false"))
        if q.license:
            params.append(("filter", f"license:{q.license}"))
        return params

    def _fetch_search(self, q: SearchQuery, token: str | None) -> dict[str, Any]:
        wanted = q.page * q.page_size + 1  # one more than shown tells whether a next page exists
        matches: list[ModelSummary] = []
        scanned, more = 0, False
        params = self._search_params(q, min(wanted + 20, 1000))
        for items, more_pages in self._search_pages(params, token):
            scanned, more = scanned + len(items), more_pages
            infos = (
                ModelInfo(**{"siblings": None, **item})  # type: ignore[no-untyped-call]  # untyped __init__
                for item in items
            )
            matches += [infos_mod.summary(info) for info in infos if infos_mod.keep(info, q)]
            if len(matches) >= wanted or scanned >= self._max_scan:
                break
        start = (q.page - 1) * q.page_size
        shown = matches[start : start + q.page_size]
        has_next = len(matches) > start + q.page_size or (more and len(matches) < wanted)
        return {"items": [to_data(s) for s in shown], "has_next": has_next}

    def _json_file(
        self, repo_id: str, filename: str, revision: str, token: str | None
    ) -> tuple[dict[str, Any], str]:
        url = f"{self.endpoint}/{repo_id}/resolve/{_quote(revision)}/{filename}"
        with self._hub_errors(token=token, repo_id=repo_id, revision=revision, filename=filename):
            response = self._get(url, token)
        sha = response.headers.get(constants.HUGGINGFACE_HEADER_X_REPO_COMMIT) or revision
        return response.json(), sha

    def _config_from_hub(self, repo_id: str, revision: str, token: str | None) -> dict[str, Any]:
        config, sha = self._json_file(repo_id, "config.json", revision, token)
        self._configs.put(repo_id, sha, config)
        return config

    def _config_at(self, repo_id: str, sha: str, token: str | None) -> dict[str, Any]:
        stored = self._configs.get(repo_id, sha)
        return stored if stored is not None else self._config_from_hub(repo_id, sha, token)

    def _header_parameters(self, info: ModelInfo, token: str | None) -> dict[str, int]:
        """Parameter counts from the safetensors headers, when the Hub has not computed them."""
        names = {s.rfilename for s in info.siblings or []}
        sha = str(info.sha)
        if _INDEX in names:
            index, _ = self._json_file(info.id, _INDEX, sha, token)
            shards = sorted(set(index.get("weight_map", {}).values()))
        else:
            shards = ["model.safetensors"] if "model.safetensors" in names else []
        totals: Counter[str] = Counter()
        with self._hub_errors(token=token, repo_id=info.id, revision=sha):
            for shard in shards:
                metadata = self._api.parse_safetensors_file_metadata(
                    info.id, shard, revision=sha, token=token or False, timeout=self._timeout_s
                )
                totals.update(metadata.parameter_count)
        return dict(totals)

    def _fetch_card(self, repo_id: str, revision: str | None, token: str | None) -> dict[str, Any]:
        with self._hub_errors(token=token, repo_id=repo_id, revision=revision):
            info = self._api.model_info(
                repo_id,
                revision=revision,
                files_metadata=True,
                timeout=self._timeout_s,
                token=token or False,
            )
        config: dict[str, Any] | None = None
        config_error: str | None = None
        try:
            config = self._config_at(repo_id, str(info.sha), token)
        except (HubGatedError, HubEntryNotFoundError) as exc:
            config_error = exc.message
        if config is not None and _HF_QUANT in {s.rfilename for s in info.siblings or []}:
            # ModelOpt <= 0.29 keeps the quantization beside config.json, and vLLM reads it there
            hf_quant, _ = self._json_file(repo_id, _HF_QUANT, str(info.sha), token)
            config = planning.with_hf_quant_config(config, hf_quant)
        if info.safetensors is not None:
            by_dtype = dict(info.safetensors.parameters)
        else:
            by_dtype = self._header_parameters(info, token) if config_error is None else {}
        card: dict[str, Any] = to_data(
            infos_mod.card_fields(info, revision, self.endpoint, config, config_error, by_dtype)
        )
        if config is not None:
            card["sentence_transformers"] = sentence_transformers(
                info, lambda name: self._json_file(info.id, name, str(info.sha), token)[0]
            )
        return card


def _quote(revision: str) -> str:
    return quote(revision, safe="")
