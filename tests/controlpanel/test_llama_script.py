"""scripts/llama.sh without a build: a binary of one's own wins, a cached one is reused at once,
and a bad path is refused before anything is built."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "llama.sh"


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _fake_server(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'version: 11434 (fake)'\n")
    path.chmod(0o755)
    return path


def test_a_named_binary_is_used_and_recorded(tmp_path: Path):
    own = _fake_server(tmp_path / "cuda" / "llama-server")
    env = {"SHARDBOARD_LLAMA_SERVER_BIN": str(own), "SHARDBOARD_VAR_DIR": str(tmp_path / "var")}
    done = _run(env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "var" / "llama-server.path").read_text().strip() == str(own)
    assert _run(env, "--path").stdout.strip() == str(own)


def test_a_named_path_that_is_not_executable_is_refused(tmp_path: Path):
    env = {
        "SHARDBOARD_LLAMA_SERVER_BIN": str(tmp_path / "absent"),
        "SHARDBOARD_VAR_DIR": str(tmp_path),
    }
    done = _run(env)
    assert done.returncode != 0 and "is not an executable file" in done.stderr


def test_a_cached_build_is_reused_without_building(tmp_path: Path):
    cache = tmp_path / "cache"
    cpu_key = subprocess.run(  # the same key the script computes
        ["bash", "-c", "grep -m1 '^flags' /proc/cpuinfo | sha1sum | cut -c1-8"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    built = _fake_server(cache / f"b11434-cpu-{cpu_key}" / "llama-server")
    env = {"SHARDBOARD_LLAMA_CACHE": str(cache), "SHARDBOARD_VAR_DIR": str(tmp_path / "var")}
    env["SHARDBOARD_LLAMA_SERVER_BIN"] = ""
    began = time.monotonic()
    done = _run(env)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < 10  # nothing fetched, nothing compiled
    assert "Building" not in done.stdout
    assert (tmp_path / "var" / "llama-server.path").read_text().strip() == str(built)


def test_without_a_cache_or_a_binary_path_reports_none(tmp_path: Path):
    env = {"SHARDBOARD_LLAMA_CACHE": str(tmp_path / "empty"), "SHARDBOARD_LLAMA_SERVER_BIN": ""}
    done = _run(env | {"SHARDBOARD_VAR_DIR": str(tmp_path)}, "--path")
    assert done.returncode != 0 and done.stdout == ""
