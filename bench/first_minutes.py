"""The first minutes on a new machine, measured: `make run` on a fresh clone with an empty engine
cache and no .venv, until the login page answers and every engine is ready (issue 40).

    python3 bench/first_minutes.py --repo /work/main --branch wt-prep --dir /tmp/fresh-1 \
        [--port 8490] [--redis-port 6490] [--timeout-s 1800]

Clones the branch into DIR/src, runs `make run` there (SQLite, its own Redis under var/, the
engine cache in DIR/cache), then every second polls the login page and each engine's
`scripts/<engine>.sh --path`; prints the seconds from `make run` to each, the CPU-seconds its
processes had used by then (what the machine's load does not change), the load average seen
meanwhile, and `make run`'s own lines with their times. Stops everything it started and
leaves DIR for inspection (the cache holds about 3.5 GB: remove DIR when done). Standard
library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ENGINES = {"transformers": "transformers.sh", "vllm": "vllm.sh", "llamacpp": "llama.sh"}


def main() -> int:
    args = parse()
    base = Path(args.dir)
    if base.exists():
        sys.exit(f"{base} exists: give a new --dir")
    src, cache = base / "src", base / "cache"
    subprocess.run(["git", "clone", "-q", "-b", args.branch, args.repo, str(src)], check=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "TEST_"))},
        "SHARDBOARD_CACHE_DIR": str(cache),
        "SHARDBOARD_PORT": str(args.port),
        "REDIS_URL": f"redis://127.0.0.1:{args.redis_port}/0",
        "SHARDBOARD_ADMIN_PASSWORD": "first-minutes-pw",
        "SHARDBOARD_VAR_DIR": str(src / "var"),
        "PYTHONPATH": "",
    }
    env.pop("SHARDBOARD_HOST_NAME", None)
    began = time.time()
    out = (base / "make-run.log").open("w")
    proc = subprocess.Popen(
        ["make", "run"],
        cwd=src,
        env=env | {"SHARDBOARD_RUN_STARTED": str(int(began))},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[tuple[float, str]] = []
    threading.Thread(target=follow, args=(proc, out, lines, began), daemon=True).start()
    seen: dict[str, float] = {}
    cpu: dict[str, float] = {}
    loads: list[float] = []
    try:
        while time.time() - began < args.timeout_s and len(seen) < 1 + len(ENGINES):
            if proc.poll() is not None:
                break
            loads.append(os.getloadavg()[0])
            if "page" not in seen and page_answers(args.port):
                seen["page"] = time.time() - began
                cpu["page"] = tree_cpu_s(proc.pid)
            for engine, script in ENGINES.items():
                if engine not in seen and prepared(src / "scripts" / script, env):
                    seen[engine] = time.time() - began
                    cpu[engine] = tree_cpu_s(proc.pid)
            time.sleep(1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        stop_redis(src, args.redis_port)
    report = {
        "seconds": {k: round(v, 1) for k, v in seen.items()},
        "cpu_seconds_of_make_run_so_far": {k: round(v, 1) for k, v in cpu.items()},
        "load_avg_1m": {"min": min(loads, default=0), "max": max(loads, default=0)},
        "make_run_lines": [f"{t:7.1f} s  {text}" for t, text in lines if "==>" in text],
    }
    print(json.dumps(report, indent=2))
    (base / "report.json").write_text(json.dumps(report, indent=2))
    return 0 if len(seen) == 1 + len(ENGINES) else 1


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--branch", default="main")
    parser.add_argument("--dir", required=True)
    parser.add_argument("--port", type=int, default=8490)
    parser.add_argument("--redis-port", type=int, default=6490)
    parser.add_argument("--timeout-s", type=float, default=1800)
    return parser.parse_args()


def follow(
    proc: subprocess.Popen[str], out: object, lines: list[tuple[float, str]], began: float
) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        out.write(line)  # type: ignore[attr-defined]
        out.flush()  # type: ignore[attr-defined]
        lines.append(
            (time.time() - began, line.rstrip().replace("\x1b[1m", "").replace("\x1b[0m", ""))
        )


def tree_cpu_s(root: int) -> float:
    """CPU-seconds (user + system) used so far by `root` and every process under it: each live
    one's own and its reaped children's (which the kernel adds to their parent as they end)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime

    def under(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parents.get(pid, 0)
        return False

    return sum(t for pid, t in times.items() if under(pid)) / tick


def stop_redis(src: Path, port: int) -> None:
    """The Redis `make run` started for the clone (scripts/lib.sh ensure_redis) outlives it."""
    pidfile = src / "var" / "redis" / f"redis-{port}.pid"
    if pidfile.is_file():
        try:
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
        except (ValueError, ProcessLookupError):
            pass


def page_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def prepared(script: Path, env: dict[str, str]) -> bool:
    done = subprocess.run(
        ["bash", str(script), "--path"],
        env=env,
        capture_output=True,
        check=False,
        timeout=30,
    )
    return done.returncode == 0


if __name__ == "__main__":
    sys.exit(main())
