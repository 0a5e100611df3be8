"""`manage.py audit_verify` over a long audit trail: time and peak memory.

    .venv/bin/python bench/audit_verify.py [--rows 1000000] [--also 100000]

Needs a PostgreSQL DATABASE_URL: a scratch database next to it (`<name>_auditbench`) is
created, migrated and filled with a chain of `--rows` rows (hashed exactly as the write path
hashes them, loaded with COPY), then dropped. audit_verify runs as a child process; its peak
RSS (ru_maxrss) is compared with that of a child that only loads Django (`manage.py check`),
and with a verification of `--also` rows, to show that memory does not grow with the chain.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controlpanel.auditchain.canonical import GENESIS, canonical_json, row_hash  # noqa: E402


def scratch_url(url: str) -> tuple[str, str, str]:
    """(admin URL, scratch URL, scratch name) for the server of `url`."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/") + "_auditbench"
    return (
        urlunsplit(parts._replace(path="/postgres")),
        urlunsplit(parts._replace(path=f"/{name}")),
        name,
    )


def child(args: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """(wall s, peak RSS MiB, output) of one manage.py command run as a fresh process."""
    code = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "took = time.perf_counter() - t\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps([took, peak, p.returncode, p.stdout + p.stderr]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, sys.executable, "manage.py", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    ).stdout
    took, peak_kib, rc, text = json.loads(out)
    return took, peak_kib // 1024, f"rc={rc} {text.strip()}"


def fill(url: str, rows: int, start_seq: int = 0, prev: str = GENESIS) -> str:
    """Append `rows` chained rows after position `start_seq`; the last hash."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    actions = ("deployment.create", "deployment.stop", "playground.request", "auth.login")
    columns = "actor_name, action, target_type, target_id, detail, client_ip, created_at, seq, prev_hash, row_hash"
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        with cur.copy(f"COPY controlpanel_auditevent ({columns}) FROM STDIN") as copy:
            for i in range(start_seq + 1, start_seq + rows + 1):
                at = t0 + timedelta(seconds=i)
                action = actions[i % len(actions)]
                detail = {
                    "deployment": f"d{i % 97}",
                    "http_status": 200,
                    "ttft_ms": 12.5,
                    "usage": {"prompt": i % 500, "completion": 64},
                }
                digest = row_hash(
                    seq=i,
                    prev_hash=prev,
                    created_at=at,
                    actor_id=None,
                    actor_name="bench",
                    action=action,
                    target_type="deployment",
                    target_id=str(i % 97),
                    detail=detail,
                    client_ip="10.0.0.7",
                )
                copy.write_row(
                    (
                        "bench",
                        action,
                        "deployment",
                        str(i % 97),
                        canonical_json(detail),
                        "10.0.0.7",
                        at,
                        i,
                        prev,
                        digest,
                    )
                )
                prev = digest
    return prev


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--also", type=int, default=100_000, help="a shorter chain, verified first")
    parser.add_argument("--keep", action="store_true", help="leave the scratch database")
    opts = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("DATABASE_URL must name a PostgreSQL database")
    admin_url, bench_url, name = scratch_url(url)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    env = {**os.environ, "DATABASE_URL": bench_url, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)
    base_s, base_mib, _ = child(["check"], env)
    print(f"baseline (manage.py check): {base_s:.1f} s, peak RSS {base_mib} MiB")
    results = []
    done, prev = 0, GENESIS
    for target in sorted({opts.also, opts.rows}):
        t = time.perf_counter()
        prev = fill(bench_url, target - done, done, prev)
        done = target
        print(f"filled to {done:,} rows in {time.perf_counter() - t:.1f} s")
        took, peak, text = child(["audit_verify"], env)
        print(
            f"audit_verify over {done:,} rows: {took:.1f} s ({done / took:,.0f} rows/s), peak RSS {peak} MiB — {text}"
        )
        results.append({"rows": done, "seconds": round(took, 2), "peak_rss_mib": peak})
    print(json.dumps({"baseline_peak_rss_mib": base_mib, "runs": results}))
    if not opts.keep:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
