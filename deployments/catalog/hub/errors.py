"""One error family for everything the Hub can refuse, each with a message a user can act on."""

from __future__ import annotations

from typing import ClassVar

import httpx2
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
    SafetensorsParsingError,
)
from huggingface_hub.utils import parse_ratelimit_headers


class HubError(Exception):
    """Base of the family; `code` is stable, for templates and JSON."""

    code: ClassVar[str] = "hub_error"

    def __init__(self, message: str, *, repo_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.repo_id = repo_id


class HubNotFoundError(HubError):
    code = "not_found"


class HubEntryNotFoundError(HubNotFoundError):
    code = "entry_not_found"


class HubRevisionNotFoundError(HubError):
    code = "revision_not_found"


class HubGatedError(HubError):
    code = "gated"


class HubUnauthorizedError(HubError):
    code = "unauthorized"


class HubBadResponseError(HubError):
    code = "bad_response"


class HubUnavailableError(HubError):
    """The Hub could not answer now; a cached entry, even an old one, may stand in."""

    code = "unavailable"


class HubRateLimitedError(HubUnavailableError):
    code = "rate_limited"

    def __init__(
        self, message: str, *, repo_id: str | None = None, retry_after_s: int | None
    ) -> None:
        super().__init__(message, repo_id=repo_id)
        self.retry_after_s = retry_after_s


class HubUnreachableError(HubUnavailableError):
    code = "unreachable"

    def __init__(self, message: str, *, repo_id: str | None = None, offline_mode: bool) -> None:
        super().__init__(message, repo_id=repo_id)
        self.offline_mode = offline_mode


def offline_error(what: str) -> HubUnreachableError:
    return HubUnreachableError(
        f"Hub unreachable: offline mode is on (HF_HUB_OFFLINE=1) and {what} is not cached yet. "
        "Unset HF_HUB_OFFLINE, or look at it once while the Hub is reachable.",
        offline_mode=True,
    )


def unreachable_error(endpoint: str, what: str) -> HubUnreachableError:
    return HubUnreachableError(
        f"Hub unreachable: cannot connect to {endpoint} (network down or Hub unavailable) and "
        f"{what} is not cached yet. Try again when the network is back.",
        offline_mode=False,
    )


def _gated_message(repo_id: str, hub_url: str, token_sent: bool) -> str:
    page = f"{hub_url}/{repo_id}"
    if token_sent:
        return (
            f"{repo_id} is gated and the Hub token in use has not been granted access: "
            f"request access on {page}, then retry once the authors approve it."
        )
    return (
        f"{repo_id} is gated: request access on {page}, then set a Hub token that has access "
        "(HF_TOKEN in the server settings, or your own token in your profile)."
    )


def _retry_after_s(error: HfHubHTTPError) -> int | None:
    info = parse_ratelimit_headers(error.response.headers)
    if info is not None:
        return info.reset_in_seconds
    value = error.response.headers.get("Retry-After", "")
    return int(value) if value.isdigit() else None


def _http_error(error: HfHubHTTPError, repo_id: str | None, endpoint: str) -> HubError:
    status = error.response.status_code
    if status == 401:
        return HubUnauthorizedError(
            "The Hub rejected the token (invalid or expired): update HF_TOKEN in the server "
            "settings or the token in your profile.",
            repo_id=repo_id,
        )
    if status == 429:
        retry = _retry_after_s(error)
        when = f" Retry in about {retry} s." if retry is not None else " Retry in a few minutes."
        return HubRateLimitedError(
            "The Hub is rate-limiting this server's requests."
            + when
            + " Setting a Hub token raises the limit.",
            repo_id=repo_id,
            retry_after_s=retry,
        )
    if status >= 500:
        return HubUnreachableError(
            f"The Hub at {endpoint} is failing (HTTP {status}); try again later.",
            repo_id=repo_id,
            offline_mode=False,
        )
    return HubBadResponseError(f"The Hub refused the request (HTTP {status}).", repo_id=repo_id)


def translate(
    error: Exception,
    *,
    repo_id: str | None,
    revision: str | None,
    endpoint: str,
    token_sent: bool,
    filename: str | None = None,
) -> HubError | None:
    """The HubError for a huggingface_hub/httpx failure, or None when it is not a Hub failure."""
    if isinstance(error, GatedRepoError):  # before RepositoryNotFoundError: it is a subclass
        return HubGatedError(_gated_message(repo_id or "?", endpoint, token_sent), repo_id=repo_id)
    if isinstance(error, RevisionNotFoundError):
        return HubRevisionNotFoundError(
            f"{repo_id} has no revision {revision!r}: check the branch, tag or commit id.",
            repo_id=repo_id,
        )
    if isinstance(error, RemoteEntryNotFoundError):
        return HubEntryNotFoundError(
            f"{repo_id} has no {filename or 'such file'}: it is probably not a Transformers "
            "checkpoint (GGUF-only repos cannot be served by vLLM).",
            repo_id=repo_id,
        )
    if isinstance(error, RepositoryNotFoundError):
        return HubNotFoundError(
            f"No model {repo_id} on the Hub: check the spelling. If it is private, set a token "
            "that can read it.",
            repo_id=repo_id,
        )
    if isinstance(error, HFValidationError):  # huggingface_hub checks ids before any request
        return HubNotFoundError(f"{repo_id!r} is not a valid Hub model id.", repo_id=repo_id)
    if isinstance(error, HfHubHTTPError):
        return _http_error(error, repo_id, endpoint)
    if isinstance(error, SafetensorsParsingError):
        return HubBadResponseError(f"Unreadable safetensors header in {repo_id}: {error}")
    if isinstance(error, OfflineModeIsEnabled):
        return offline_error(repo_id or "this search")
    if isinstance(error, httpx2.TransportError):
        return unreachable_error(endpoint, repo_id or "this search")
    return None
