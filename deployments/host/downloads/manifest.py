"""Which downloads ended whole: a manifest per (repo, revision as asked) in the Hub cache (a
folder scan_cache_dir skips with a warning), listing
the commit, the snapshot and its files. A snapshot holds only whole files (huggingface_hub
links a file into it once written), so a cancelled download leaves a snapshot with some of
them: without its manifest it never counts as complete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from huggingface_hub import constants as hf_constants

from deployments.host.downloads import hub


def _manifest_path(repo_id: str, revision: str) -> Path:
    name = f"{repo_id.replace('/', '--')}@{(revision or 'main').replace('/', '--')}.json"
    return _folder() / name


def _folder() -> Path:
    return Path(hf_constants.HF_HUB_CACHE) / ".shardboard-manifests"


def complete_snapshot(repo_id: str, revision: str) -> Path | None:
    """The snapshot a whole earlier download left, if every file of it is still there."""
    path = _manifest_path(repo_id, revision)
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    snapshot = Path(manifest["snapshot"])
    if all((snapshot / name).is_file() for name in manifest["files"]):
        return snapshot
    return None


def save_manifest(repo_id: str, revision: str, fetched: hub.Fetched) -> None:
    path = _manifest_path(repo_id, revision)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"commit": fetched.commit, "snapshot": str(fetched.snapshot), "files": fetched.files}
    path.write_text(json.dumps(body))


def manifests() -> list[dict[str, Any]]:
    found = []
    for path in _folder().glob("*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return found
