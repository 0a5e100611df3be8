"""What each fault costs: the fault-injection suite run, and its table printed.

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/faults.py [--table-only]

Runs ``tests/faults`` (real host workers, real transformers engines on simulated GPUs, a
real web server, and a Redis or a PostgreSQL of each test's own that is stopped and started)
and prints, per fault: the seconds until the user can act again (the deployment running, or
stopped/failed with its leases freed; for a playground stream, answered again), then the
deployments left stuck (not running, stopped or failed), the leases held by
a finished deployment, the engine processes left alive without a running deployment and the
audit rows missing. Every column but the first must be 0: each test asserts it.
``--table-only`` prints the table of the last run (``$SHARDBOARD_VAR_DIR/faults.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.faults.table import table  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args()
    var_dir = Path(os.environ.get("SHARDBOARD_VAR_DIR", ROOT / "var"))
    results = var_dir / "faults.json"
    code = 0
    if not args.table_only:
        results.unlink(missing_ok=True)
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/faults"]
        code = subprocess.run(
            pytest, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
        ).returncode
    if not results.exists():
        print(f"no results at {results}", file=sys.stderr)
        return code or 1
    print(table(json.loads(results.read_text())))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
