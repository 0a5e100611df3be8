"""One model revision from the Hub into this host's Hub cache, with huggingface_hub.

No Django. The files an engine needs only (safetensors, configs, tokenizer; `.bin`/`.pt`
copies only where a repo has no safetensors; or only the files a job names, such as one GGUF
quantization of a repo holding many), the disk checked before a byte is fetched,
progress counted per file, and a stop that interrupts the transfer. A connection cut
mid-file is resumed by huggingface_hub itself (`http_get` retries with a Range); a stopped or
failed attempt is resumed by the next one: weights (LFS files) are written to
`.shardboard-partial/<etag>.part` in the cache, which survives the attempt (hf_hub_download
deletes its per-attempt temporary file, huggingface_hub PR #4228), and are moved into the
cache's blobs and linked into the snapshot only once whole.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock
from huggingface_hub import (
    HfApi,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
    try_to_load_from_cache,
)
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.file_download import http_get
from huggingface_hub.utils import build_hf_headers
from huggingface_hub.utils import tqdm as base_tqdm

WEIGHTS = ("*.safetensors",)
FALLBACK_WEIGHTS = ("*.bin", "*.pt", "*.pth")  # only where a repo has no safetensors
GGUF = ("*.gguf",)  # fetched only when named (`Job.only_files`): a repo holds many quantizations
SMALL_FILES = ("*.json", "*.model", "*.tiktoken", "*.txt", "*.jinja", "tokenizer*")
PARALLEL_FILES = 4
PROGRESS_EVERY_S = 0.5
GIB = 1 << 30


class DownloadError(Exception):
    """The download cannot go on; the message is for the operator."""


class DiskRefused(DownloadError):
    """Not enough disk for the files still missing: refused before any byte is fetched."""


class Cancelled(DownloadError):
    """Stopped from outside (a stop of the deployment, a cancel of the pre-fetch)."""


@dataclass(frozen=True, slots=True)
class Job:
    repo_id: str
    revision: str | None
    cache_dir: Path
    endpoint: str | None = None
    token: str | None = field(default=None, repr=False)
    min_free_bytes: int = 0
    # These files only (a GGUF quantization and its split parts), instead of `select_files`.
    only_files: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a download is: bytes done of the total, the rate, the time left, per file."""

    commit: str
    done_bytes: int
    total_bytes: int
    rate_bps: float
    eta_s: float | None
    files: dict[str, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Fetched:
    commit: str
    snapshot: Path
    files: tuple[str, ...]
    total_bytes: int
    fetched_bytes: int  # bytes this call transferred (0: all were in the cache)
    elapsed_s: float


def select_files(sizes: dict[str, int]) -> dict[str, int]:
    """The files an engine loads: weights in one format, configs and tokenizer files."""
    names = list(sizes)
    weights = [n for n in names if _matches(n, WEIGHTS)]
    if not weights:
        weights = [n for n in names if _matches(n, FALLBACK_WEIGHTS)]
    small = [n for n in names if _matches(n, SMALL_FILES) and n not in weights]
    return {n: sizes[n] for n in sorted({*weights, *small})}


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    base = name.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(base, p) for p in patterns)


@dataclass(frozen=True, slots=True)
class Revision:
    commit: str  # what the revision points at
    files: dict[str, int]  # the files to fetch, with their sizes
    etags: dict[str, str]  # an LFS file's sha256: the Hub's ETag, the name of its .part


def resolve(job: Job) -> Revision:
    """The commit the revision points at, the files to fetch, and their ETags."""
    api = HfApi(endpoint=job.endpoint or None, token=job.token or False)
    try:
        info = api.model_info(job.repo_id, revision=job.revision or None, files_metadata=True)
    except HfHubHTTPError as exc:
        raise DownloadError(_hub_message(exc)) from exc
    siblings = info.siblings or []
    sizes = {s.rfilename: int(s.size or 0) for s in siblings}
    files = _named(job, sizes) if job.only_files else select_files(sizes)
    if not files:
        raise DownloadError(f"{job.repo_id} has no safetensors, .bin or config files to serve")
    etags = {s.rfilename: s.lfs.sha256 for s in siblings if s.lfs and s.rfilename in files}
    return Revision(str(info.sha), files, etags)


def _named(job: Job, sizes: dict[str, int]) -> dict[str, int]:
    if missing := [n for n in job.only_files if n not in sizes]:
        raise DownloadError(f"{job.repo_id} has no file {', '.join(missing)} at this revision")
    return {n: sizes[n] for n in sorted(job.only_files)}


def _hub_message(exc: HfHubHTTPError) -> str:
    """The Hub's own words (its X-Error-Message), without huggingface_hub's request dump."""
    server = getattr(exc, "server_message", None)
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{type(exc).__name__}: {server or first}"


def cached(job: Job, commit: str, name: str) -> bool:
    found = try_to_load_from_cache(job.repo_id, name, cache_dir=job.cache_dir, revision=commit)
    return isinstance(found, str)


def partial_bytes(job: Job, etags: dict[str, str]) -> dict[str, int]:
    """Bytes an earlier, stopped attempt left of each file (`.shardboard-partial/<etag>.part`):
    the next attempt goes on from there, so the disk needs only the rest."""
    folder = job.cache_dir / ".shardboard-partial"
    found = {}
    for name, etag in etags.items():
        try:
            found[name] = (folder / f"{etag}.part").stat().st_size
        except OSError:
            continue
    return found


def check_disk(job: Job, missing_bytes: int) -> None:
    job.cache_dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(job.cache_dir).free
    if free - missing_bytes < job.min_free_bytes:
        raise DiskRefused(
            f"not enough disk for {job.repo_id}: {_gib(missing_bytes)} still to fetch, "
            f"{_gib(free)} free in {job.cache_dir}, and {_gib(job.min_free_bytes)} must stay "
            f"free (SHARDBOARD_DOWNLOAD_MIN_FREE_BYTES): free {_gib(missing_bytes + job.min_free_bytes - free)} "
            "more, or delete unused models on the Models on hosts page"
        )


def _gib(n: int) -> str:
    return f"{n / GIB:,.2f} GiB"


class _Counter:
    """Bytes per file, shared by the download threads; a stop makes the next update raise."""

    def __init__(self, files: dict[str, int]) -> None:
        self.lock = threading.Lock()
        self.files = {name: [0, size] for name, size in files.items()}
        self.stop = threading.Event()

    def add(self, name: str, n: int) -> None:
        with self.lock:
            self.files[name][0] += n

    def set(self, name: str, done: int, total: int | None = None) -> None:
        with self.lock:
            self.files[name][0] = done
            if total:
                self.files[name][1] = total

    def snapshot(self) -> dict[str, tuple[int, int]]:
        with self.lock:
            return {n: (min(d, t) if t else d, t) for n, (d, t) in self.files.items()}

    def bar_for(self, name: str) -> type[base_tqdm]:
        counter = self

        class Bar(base_tqdm):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs["disable"] = True  # a worker has no terminal; the counter is the view
                super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
                counter.set(name, int(kwargs.get("initial") or 0), kwargs.get("total"))

            def update(self, n: float | None = 1) -> bool | None:
                counter.add(name, int(n or 0))
                if counter.stop.is_set():
                    raise Cancelled("stopped during the download")
                return super().update(n)  # type: ignore[no-any-return]

        return Bar


def fetch(
    job: Job,
    *,
    on_progress: Callable[[Progress], None],
    should_stop: Callable[[], bool],
    resolved: Revision | None = None,
) -> Fetched:
    """Every file of the revision into the cache. Raises DownloadError (or a subclass)."""
    revision = resolved or resolve(job)
    commit, files = revision.commit, revision.files
    have = {n for n in files if cached(job, commit, n)}
    begun = partial_bytes(job, revision.etags)
    check_disk(job, sum(s - min(begun.get(n, 0), s) for n, s in files.items() if n not in have))
    counter = _Counter(files)
    for name in have:
        counter.set(name, files[name])
    start = time.monotonic()
    base = sum(files[n] for n in have)
    missing = [n for n in files if n not in have]
    if missing:
        _transfer(job, commit, missing, counter, on_progress, should_stop, start, base)
    write_ref(job, commit)
    on_progress(_progress(commit, counter, start, base, final=True))
    snapshot = repo_folder(job) / "snapshots" / commit
    done = sum(files.values())
    return Fetched(commit, snapshot, tuple(files), done, done - base, time.monotonic() - start)


def _transfer(
    job: Job,
    commit: str,
    names: list[str],
    counter: _Counter,
    on_progress: Callable[[Progress], None],
    should_stop: Callable[[], bool],
    start: float,
    base: int,
) -> None:
    pool = ThreadPoolExecutor(max_workers=PARALLEL_FILES, thread_name_prefix="hub-fetch")
    try:
        futures = [pool.submit(_one, job, commit, name, counter) for name in names]
        pending: set[Future[str]] = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=PROGRESS_EVERY_S, return_when=FIRST_EXCEPTION)
            for future in finished:
                future.result()  # the first failure ends the download
            if should_stop():
                counter.stop.set()
                raise Cancelled("stopped during the download")
            on_progress(_progress(commit, counter, start, base, final=False))
    except BaseException:
        counter.stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _one(job: Job, commit: str, name: str, counter: _Counter) -> str:
    if counter.stop.is_set():
        raise Cancelled("stopped during the download")
    try:
        if _matches(name, WEIGHTS + FALLBACK_WEIGHTS + GGUF):
            path = _resumable(job, commit, name, counter)
        else:
            path = hf_hub_download(
                job.repo_id,
                name,
                revision=commit,
                cache_dir=job.cache_dir,
                endpoint=job.endpoint or None,
                token=job.token or False,
                tqdm_class=counter.bar_for(name),
            )
    except HfHubHTTPError as exc:
        raise DownloadError(_hub_message(exc)) from exc
    size = Path(path).stat().st_size
    counter.set(name, size, size)
    return path


def repo_folder(job: Job) -> Path:
    return job.cache_dir / f"models--{job.repo_id.replace('/', '--')}"


def _resumable(job: Job, commit: str, name: str, counter: _Counter) -> str:
    """One weights file into the cache, continuing what an earlier attempt left."""
    url = hf_hub_url(job.repo_id, name, revision=commit, endpoint=job.endpoint or None)
    meta = get_hf_file_metadata(url, token=job.token or False)
    if not meta.etag:
        raise DownloadError(f"the Hub gave no ETag for {name}")
    blob = repo_folder(job) / "blobs" / meta.etag
    partial = job.cache_dir / ".shardboard-partial" / f"{meta.etag}.part"
    blob.parent.mkdir(parents=True, exist_ok=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    # Two downloads of one file at once (a pre-fetch and a launch) take turns on its .part.
    with FileLock(f"{partial}.lock"):
        if not blob.exists():
            _append(meta.location, partial, blob, job, meta.size, counter.bar_for(name))
    link = repo_folder(job) / "snapshots" / commit / name
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.unlink(missing_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return str(link)


def _append(
    url: str, partial: Path, blob: Path, job: Job, size: int | None, bar: type[base_tqdm]
) -> None:
    headers = build_hf_headers(token=job.token or False)
    with partial.open("ab") as f:
        http_get(url, f, resume_size=f.tell(), headers=headers, expected_size=size, tqdm_class=bar)
    os.replace(partial, blob)


def write_ref(job: Job, commit: str) -> None:
    """refs/<revision> -> commit, as huggingface_hub keeps it (a commit asked for has none)."""
    revision = job.revision or "main"
    if revision != commit:
        ref = repo_folder(job) / "refs" / revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)


def _progress(commit: str, counter: _Counter, start: float, base: int, *, final: bool) -> Progress:
    files = counter.snapshot()
    done = sum(d for d, _ in files.values())
    total = sum(t for _, t in files.values())
    elapsed = max(time.monotonic() - start, 1e-6)
    rate = max(done - base, 0) / elapsed
    eta = 0.0 if final else ((total - done) / rate if rate > 0 else None)
    return Progress(commit, done, total, rate, eta, files)
