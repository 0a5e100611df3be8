"""The disk check of a download counts what an earlier, stopped attempt already left on disk:
a resumed download of a large model on a nearly full disk needs room for the rest only. The
real `hub.fetch` against the Hub stand-in, on a repo with an 8 GiB sparse weights file (no
disk spent), with a floor set between "the whole file" and "the rest of it"."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deployments.host.downloads import hub
from tests.support.hubstub import HubStub
from tests.support.hubstub.served import MIB, folder_repo

REPO = "sbtest/huge-weights"
WEIGHTS = "model-00001-of-00001.safetensors"
SIZE = 8 << 30


@pytest.fixture
def huge(hub: HubStub, tiny_model: Path, tmp_path: Path) -> HubStub:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    hub.add_repo(folder_repo(REPO, tiny_model, sparse_files={WEIGHTS: SIZE}, scratch=scratch))
    hub.throttle_bps = 64 * MIB  # some MiB move before the test stops the transfer
    return hub


def test_a_resumed_download_needs_disk_for_the_rest_only(huge: HubStub, tmp_path: Path) -> None:
    cache = tmp_path / "hub-cache"
    job = hub.Job(repo_id=REPO, revision=None, cache_dir=cache, endpoint=huge.url)
    revision = hub.resolve(job)
    total = sum(revision.files.values())
    assert revision.etags[WEIGHTS]  # the LFS sha256: the name of the file's .part
    cache.mkdir()
    begun = SIZE - 64 * MIB
    # Room for half of what an earlier attempt fetched, more than the rest, far less than all.
    floor = shutil.disk_usage(cache).free - total + begun // 2
    job = hub.Job(
        repo_id=REPO, revision=None, cache_dir=cache, endpoint=huge.url, min_free_bytes=floor
    )

    def never(_: hub.Progress) -> None:
        raise AssertionError("a refused download made progress")

    with pytest.raises(hub.DiskRefused, match=f"not enough disk for {REPO}"):
        hub.fetch(job, on_progress=never, should_stop=lambda: False, resolved=revision)
    assert not huge.count(f"/{REPO}/resolve/", method="GET")

    partial = cache / ".shardboard-partial" / f"{revision.etags[WEIGHTS]}.part"
    partial.parent.mkdir(parents=True)
    with partial.open("wb") as f:
        f.truncate(begun)  # sparse: the bytes an earlier attempt left, at no disk cost here
    assert hub.partial_bytes(job, revision.etags) == {WEIGHTS: begun}
    with pytest.raises(hub.Cancelled):  # past the disk check: the transfer began, then stopped
        hub.fetch(job, on_progress=lambda _: None, should_stop=lambda: True, resolved=revision)
