"""A LoRA adapter repo on the Hub: its adapter_config.json and its safetensors header, read
through the hub client's own calls (its token, its error translation), with a range request for
the header: no weights are fetched."""

from __future__ import annotations

from typing import Any

from deployments.catalog.hub.client import HubClient

CONFIG = "adapter_config.json"  # a PEFT adapter's files, as vLLM reads them
WEIGHTS = "adapter_model.safetensors"
Header = dict[str, tuple[tuple[int, ...], int]]  # tensor name → (shape, bytes)


def adapter_files(
    client: HubClient, repo_id: str, revision: str | None, token: str | None
) -> tuple[dict[str, Any], Header, str]:
    """The config, the header's tensors, and the commit both were read at."""
    tok = client._tok(token)
    config, sha = client._json_file(repo_id, CONFIG, revision or "main", tok)
    with client._hub_errors(token=tok, repo_id=repo_id, revision=sha, filename=WEIGHTS):
        metadata = client._api.parse_safetensors_file_metadata(
            repo_id, WEIGHTS, revision=sha, token=tok or False, timeout=client._timeout_s
        )
    tensors = {
        name: (tuple(info.shape), info.data_offsets[1] - info.data_offsets[0])
        for name, info in metadata.tensors.items()
    }
    return config, tensors, sha
