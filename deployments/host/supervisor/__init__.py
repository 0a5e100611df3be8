"""Engine processes on one host: spawn, probe, watch, stop, find again after a worker restart.

Runs in the host worker. No Django here: the host worker's Celery tasks call these functions
and persist the results; nothing of the project is imported but ``deployments.engines``.
Launch: adapter.build(spec) → spawn(cmd.argv, cmd.env, log) → wait_ready(...) → smoke_test(...).
Watchdog: poll_exit(handle) every second (or watch()); on an exit, stop(handle) sweeps the
group and diagnosis.diagnose_exit(tail(log), ...) says why. Reconcile: find_engines(), adopt().
"""

from deployments.host.probes import (
    ReadyResult,
    SmokeResult,
    completion_text,
    smoke_test,
    sse_events,
    wait_ready,
)
from deployments.host.supervisor.discovery import FoundEngine, adopt, find_engines
from deployments.host.supervisor.groups import StopResult, group_pids, stop
from deployments.host.supervisor.processes import (
    EngineHandle,
    ExitInfo,
    child_exit,
    find_free_port,
    forget_child,
    handle_alive,
    inherited_env,
    is_alive,
    now_utc,
    poll_exit,
    reap_children,
    spawn,
    tail,
)
from deployments.host.supervisor.watch import Watcher, watch

__all__ = [
    "EngineHandle",
    "ExitInfo",
    "FoundEngine",
    "ReadyResult",
    "SmokeResult",
    "StopResult",
    "Watcher",
    "adopt",
    "child_exit",
    "completion_text",
    "find_engines",
    "find_free_port",
    "forget_child",
    "group_pids",
    "handle_alive",
    "inherited_env",
    "is_alive",
    "now_utc",
    "poll_exit",
    "reap_children",
    "smoke_test",
    "spawn",
    "sse_events",
    "stop",
    "tail",
    "wait_ready",
    "watch",
]
