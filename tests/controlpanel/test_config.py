"""Malformed settings stop start-up with one line naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, SHARDBOARD_VAR_DIR=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("DATABASE_URL", "mysql//nope"),
        ("DATABASE_URL", "postgres://u@h:notaport/db"),
        ("REDIS_URL", "http://127.0.0.1:6379"),
        ("REDIS_URL", "redis://127.0.0.1:6379/x"),
        ("DEBUG", "maybe"),
    ],
)
def test_bad_value_is_one_line(tmp_path: Path, var: str, value: str) -> None:
    result = run_check(tmp_path, **{var: value})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert var in lines[0] and "Traceback" not in result.stderr


def test_secret_key_is_generated_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    full = dict(env, SHARDBOARD_VAR_DIR=str(tmp_path))
    for _ in range(2):
        subprocess.run(
            [sys.executable, "manage.py", "check"],
            cwd=ROOT,
            env=full,
            check=True,
            capture_output=True,
            timeout=60,
        )
    key_file = tmp_path / "secret_key"
    assert key_file.exists() and len(key_file.read_text()) >= 40
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
