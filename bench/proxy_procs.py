"""The processes of bench/proxy_overhead.py: ports, the stand-in engine, the ASGI server on a
throwaway database, a private redis-server, git worktrees for --ab, and their CPU time."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout_s} s")


def bench_env(var_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SHARDBOARD_VAR_DIR=str(var_dir),
        DATABASE_URL=f"sqlite:///{var_dir / 'bench.sqlite3'}",
        PLAYGROUND_MAX_CONCURRENT="1000",
        PLAYGROUND_MAX_TOKENS="100000",
        DJANGO_SETTINGS_MODULE="controlpanel.settings",
        LOG_LEVEL="WARNING",
    )
    return env


def prepare_database(env: dict[str, str], upstream_port: int) -> str:
    """Migrate, create an operator, a token and a deployment row; returns the token."""
    return prepare_replicas(env, {"bench": [upstream_port]})


def prepare_replicas(
    env: dict[str, str], deployments: dict[str, list[int]], engines: dict[str, str] | None = None
) -> str:
    """Migrate, create an operator, a token and, per name, one running replica row per engine
    port (the first stands for the deployment, the others are its replicas); returns the
    token. `engines`: a name's engine (default transformers; the gateway serves /v1/messages
    only for engines that answer it)."""
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    script = (
        "import json\n"
        "from django.contrib.auth.models import Group, User\n"
        "from deployments.models import Deployment\n"
        "from monitoring.models import Host\n"
        "from playground.services import token_create\n"
        "u = User.objects.create_user('bench-operator', password='x')\n"
        "u.groups.add(Group.objects.get_or_create(name='operator')[0])\n"
        "h = Host.objects.create(name='bench', queue='host.bench', backend='simulated', simulated=True)\n"
        f"engines = json.loads({json.dumps(engines or {})!r})\n"
        f"for name, ports in json.loads({json.dumps(deployments)!r}).items():\n"
        "    first = None\n"
        "    for i, port in enumerate(ports, 1):\n"
        "        d = Deployment.objects.create(name=name, model_id='/m', "
        " engine=engines.get(name, 'transformers'),"
        " host=h, status='running', bind_host='127.0.0.1', port=port, created_by=u,"
        " replica_index=i, replica_of=first)\n"
        "        first = first or d\n"
        "print(token_create(user=u, name='bench')[1])\n"
    )
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().splitlines()[-1]


def start_upstream(
    port: int, tokens: int, interval_ms: float, dialect: str = "transformers"
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "tests.support.stub_upstream", "--port", str(port)]
    cmd += ["--tokens", str(tokens), "--interval-ms", str(interval_ms), "--dialect", dialect]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)


def start_server(
    kind: str,
    port: int,
    env: dict[str, str],
    profile: str | None,
    workers: int,
    extra_env: dict[str, str] | None = None,
    cwd: Path = ROOT,
) -> subprocess.Popen[bytes]:
    python = [sys.executable, *(["-m", "cProfile", "-o", profile] if profile else [])]
    if kind == "daphne":
        cmd = [*python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
        cmd += ["--access-log", os.devnull]
        return subprocess.Popen([*cmd, "controlpanel.asgi:application"], cwd=ROOT, env=env)
    if kind == "granian":  # for comparison: Django's handler has no lifespan (asginl)
        cmd = [*python, "-m", "granian", "--interface", "asginl", "--host", "127.0.0.1"]
        cmd += ["--port", str(port), "--workers", str(workers), "--loop", "uvloop"]
        cmd += ["--log-level", "warning", "controlpanel.asgi:application"]
        return subprocess.Popen(cmd, cwd=cwd, env={**env, **(extra_env or {})})
    env = dict(env, SHARDBOARD_PORT=str(port), SHARDBOARD_WEB_WORKERS=str(workers))
    env.update(extra_env or {})
    cmd = [*python, "-m", "controlpanel.webserver"]
    return subprocess.Popen(cmd, cwd=cwd, env=env)


def cpu_all(pids: dict[str, int]) -> dict[str, float]:
    return {name: oncpu_s(pid) for name, pid in pids.items()}


def oncpu_s(pid: int) -> float:
    """On-CPU seconds so far of every live thread of a process and of its live children, in
    nanoseconds' resolution (schedstat), not clock ticks: one block is a fraction of a second."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that just ended
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return total / 1e9 + sum(oncpu_s(int(child)) for child in children)


def start_redis(port: int, tmp: Path) -> subprocess.Popen[bytes]:
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    cmd += ["--appendonly", "no", "--dir", str(tmp)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL)


def worktree(rev: str, tmp: Path) -> Path:
    path = tmp / f"tree-{rev.replace('/', '_')}"
    if not path.exists():
        git = ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), rev]
        subprocess.run(git, check=True)
    return path


def pin(pid: int, cpu: int | None) -> None:
    if cpu is None:
        return
    os.sched_setaffinity(pid, {cpu})
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        pin(int(child), cpu)
