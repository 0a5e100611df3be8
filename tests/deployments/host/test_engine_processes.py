"""Real engine processes: transformers serve on the tiny model, plus plain Python stand-ins
for behaviours an engine must not be trusted with (ignoring SIGTERM, dying while loading)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from deployments.engines import MARKER_ENV, EngineCommand, LaunchSpec, VllmAdapter, get_adapter
from deployments.host import supervisor as sv
from deployments.host.diagnosis import diagnose, diagnose_spawn_error
from tests.support.processes import ROOT
from tests.support.waiting import STATE_WAIT_S

pytestmark = pytest.mark.engine

READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Engine:
    command: EngineCommand
    handle: sv.EngineHandle


def _launch(deployment_id: str, model: Path, hf_home: Path, log_dir: Path) -> Engine:
    spec = LaunchSpec(
        deployment_id=deployment_id,
        model=str(model),
        port=sv.find_free_port(),
        device="cpu",
        extra_env=(("HF_HOME", str(hf_home)),),
    )
    command = get_adapter("transformers").build(spec)
    handle = sv.spawn(command.argv, command.env, log_dir / f"{deployment_id}.log")
    return Engine(command, handle)


def _wait(engine: Engine) -> sv.ReadyResult:
    return sv.wait_ready(
        engine.command.base_url,
        engine.command.probe,
        READY_TIMEOUT_S,
        lambda: sv.handle_alive(engine.handle),
        poll_s=0.2,
    )


@pytest.fixture(scope="module")
def engines(
    tiny_model: Path, hf_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Engine, Engine]]:
    """Two engines loading side by side: one to query and stop, one to SIGKILL."""
    log_dir = tmp_path_factory.mktemp("engine-logs")
    pair = (
        _launch("test-main", tiny_model, hf_home, log_dir),
        _launch("test-victim", tiny_model, hf_home, log_dir),
    )
    try:
        for engine in pair:
            result = _wait(engine)
            assert result.ready, f"{result}\n{sv.tail(engine.handle.log_path)}"
        yield pair
    finally:
        for engine in pair:
            sv.stop(engine.handle, grace_s=10.0)


@pytest.fixture
def main_engine(engines: tuple[Engine, Engine]) -> Engine:
    return engines[0]


def test_smoke_completion_answers(main_engine: Engine) -> None:
    result = sv.smoke_test(main_engine.command.base_url, main_engine.command.request_model, None)
    assert result.ok, result.reason
    assert isinstance(result.text, str)


def test_chat_completion_answers(main_engine: Engine) -> None:
    response = httpx.post(
        f"{main_engine.command.base_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "What is 1 + 1?"}], "max_tokens": 6},
        timeout=30.0,
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["role"] == "assistant"
    assert isinstance(sv.completion_text(response), str)


def test_streamed_chat_ends_without_done_marker(main_engine: Engine) -> None:
    response = httpx.post(
        f"{main_engine.command.base_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True},
        timeout=30.0,
    )
    assert response.status_code == 200
    events = sv.sse_events(response.text)
    assert events and events[-1]["choices"][0]["finish_reason"] is not None  # type: ignore[index]
    assert "[DONE]" not in response.text  # transformers serve's quirk (apis.md §2)


def test_log_captures_startup(main_engine: Engine) -> None:
    assert "Application startup complete." in sv.tail(main_engine.handle.log_path, 50)


def test_find_engines_by_marker(engines: tuple[Engine, Engine]) -> None:
    found = {f.deployment_id: f for f in sv.find_engines()}
    for engine in engines:
        entry = found[engine.handle.deployment_id]
        assert entry.pgid == engine.handle.pgid
        assert entry.leader_alive
        assert "serve" in entry.cmdline


def test_adopt_checks_the_marker(main_engine: Engine) -> None:
    handle = main_engine.handle
    adopted = sv.adopt(handle.pid, handle.deployment_id, handle.log_path)
    assert adopted is not None
    assert (adopted.pgid, adopted.create_time) == (handle.pgid, handle.create_time)
    assert sv.adopt(handle.pid, "someone-else", handle.log_path) is None


def test_sigkill_is_detected_within_two_seconds(engines: tuple[Engine, Engine]) -> None:
    victim = engines[1].handle
    exited = threading.Event()
    seen: list[sv.ExitInfo] = []
    watcher = sv.watch(victim, lambda info: (seen.append(info), exited.set()), poll_s=0.1)
    killed_at = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    assert exited.wait(2.0), "exit not noticed within 2 s"
    detect_s = time.monotonic() - killed_at
    watcher.join(1.0)
    assert seen[0].signal == signal.SIGKILL, seen[0]
    assert "killed by SIGKILL" in seen[0].description
    assert detect_s < 2.0
    assert not sv.is_alive(victim.pid)
    assert "Application startup complete." in sv.tail(victim.log_path)
    assert victim.deployment_id not in {f.deployment_id for f in sv.find_engines()}


def test_stop_ends_the_group_within_the_grace_period(main_engine: Engine) -> None:
    handle = main_engine.handle
    result = sv.stop(handle, grace_s=10.0)
    assert result.was_running
    assert result.signal_sent == "SIGTERM"
    assert result.duration_s < 10.0
    assert result.remaining_pids == ()
    assert sv.group_pids(handle.pgid) == ()
    assert result.exit is not None
    assert not sv.is_alive(handle.pid)
    again = sv.stop(handle, grace_s=1.0)
    assert not again.was_running


def _python(code: str, log_path: Path, deployment_id: str) -> sv.EngineHandle:
    return sv.spawn([sys.executable, "-c", code], {MARKER_ENV: deployment_id}, log_path)


def _wait_for_line(log_path: Path, text: str, timeout_s: float = STATE_WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in sv.tail(log_path):
        assert time.monotonic() < deadline, f"{text!r} never logged: {sv.tail(log_path)}"
        time.sleep(0.02)


IGNORE_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
STUBBORN = f"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", {IGNORE_TERM + "time.sleep(60)"!r}])
{IGNORE_TERM}print("child", child.pid, flush=True); time.sleep(60)
"""


def test_stop_escalates_to_sigkill_for_the_whole_group(tmp_path: Path) -> None:
    handle = _python(STUBBORN, tmp_path / "stubborn.log", "test-stubborn")
    _wait_for_line(handle.log_path, "child ")
    members = sv.group_pids(handle.pgid)
    assert len(members) == 2
    result = sv.stop(handle, grace_s=0.5)
    assert result.signal_sent == "SIGKILL"
    assert result.remaining_pids == ()
    assert result.exit is not None and result.exit.signal == signal.SIGKILL
    assert not any(sv.is_alive(pid) for pid in members)


def test_stop_refuses_another_deployments_group(tmp_path: Path) -> None:
    handle = _python("import time; time.sleep(30)", tmp_path / "other.log", "test-other")
    impostor = sv.EngineHandle(
        "not-this-one", handle.pid, handle.pgid, handle.started_at, handle.create_time, tmp_path
    )
    assert not sv.stop(impostor, grace_s=0.5).was_running
    assert sv.is_alive(handle.pid)
    assert sv.stop(handle, grace_s=5.0).was_running


def test_stop_refuses_a_group_without_the_marker(tmp_path: Path) -> None:
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    try:
        result = sv.stop(bystander.pid, grace_s=0.5)
        assert not result.was_running
        assert sv.is_alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()


def test_engine_dying_while_loading_is_a_result_with_a_diagnosis(tmp_path: Path) -> None:
    code = (
        "import time; time.sleep(0.3); "
        "print('ValueError: Total number of attention heads (32) must be divisible by tensor "
        "parallel size (3).', flush=True); raise SystemExit(1)"
    )
    handle = _python(code, tmp_path / "dying.log", "test-dying")
    result = sv.wait_ready(
        f"http://127.0.0.1:{sv.find_free_port()}",
        get_adapter("vllm")
        .build(LaunchSpec(deployment_id="x", model="m", port=1, gpu_indices=(0,)))
        .probe,
        timeout_s=20.0,
        is_alive_fn=lambda: sv.handle_alive(handle),
        poll_s=0.05,
    )
    assert result.outcome == "exited"
    assert result.elapsed_s < 5.0
    exit_info = sv.poll_exit(handle)
    assert exit_info is not None and exit_info.exit_code == 1
    diagnosis = diagnose(sv.tail(handle.log_path))
    assert diagnosis is not None and diagnosis.code == "heads_not_divisible"


def test_wait_ready_times_out_on_a_silent_port() -> None:
    probe = (
        get_adapter("transformers")
        .build(LaunchSpec(deployment_id="x", model="m", port=1, device="cpu"))
        .probe
    )
    result = sv.wait_ready(
        f"http://127.0.0.1:{sv.find_free_port()}", probe, 0.5, lambda: True, poll_s=0.1
    )
    assert result.outcome == "timeout"
    assert "not answering yet" in result.reason


def test_missing_vllm_executable_is_diagnosed(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-venv" / "bin" / "vllm")
    spec = LaunchSpec(deployment_id="test-novllm", model="m", port=8000, gpu_indices=(0,))
    command = VllmAdapter(executable=missing).build(spec)
    log_path = tmp_path / "novllm.log"
    with pytest.raises(FileNotFoundError) as raised:
        sv.spawn(command.argv, command.env, log_path)
    assert diagnose_spawn_error(raised.value, command.argv[0]).code == "vllm_missing"
    from_log = diagnose(sv.tail(log_path))
    assert from_log is not None and from_log.code == "vllm_missing"


def test_worker_secrets_stay_out_of_engines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DJANGO_SECRET_KEY", "worker-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://u:pw@db/x")
    monkeypatch.setenv("SHARDBOARD_TEST_PLAIN", "visible")
    code = (
        "import os; print(sorted(k for k in ('DJANGO_SECRET_KEY', 'DATABASE_URL', "
        "'SHARDBOARD_TEST_PLAIN', 'HF_TOKEN') if k in os.environ), flush=True)"
    )
    env = {MARKER_ENV: "test-env", "HF_TOKEN": "given-on-purpose"}
    handle = sv.spawn([sys.executable, "-c", code], env, tmp_path / "env.log")
    _wait_for_line(handle.log_path, "]")
    assert sv.tail(handle.log_path).strip() == "['HF_TOKEN', 'SHARDBOARD_TEST_PLAIN']"
    sv.stop(handle, grace_s=1.0)


def test_spawn_requires_the_marker(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=MARKER_ENV):
        sv.spawn([sys.executable, "-c", "pass"], {}, tmp_path / "x.log")


def test_tail_of_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert sv.tail(tmp_path / "never-written.log") == ""


WORKER = """
import sys
from pathlib import Path
from deployments.host import supervisor as sv
handle = sv.spawn(
    [sys.executable, "-c", "import time; time.sleep(60)"],
    {"SHARDBOARD_DEPLOYMENT_ID": "test-orphaned"},
    Path(sys.argv[1]),
)
print(handle.pid, handle.create_time, flush=True)
import time; time.sleep(60)
"""


def test_engine_outlives_a_killed_worker_and_is_adopted(tmp_path: Path) -> None:
    log_path = tmp_path / "orphaned.log"
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(log_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert worker.stdout is not None
    pid_text, create_time_text = worker.stdout.readline().split()
    worker.kill()
    worker.wait()
    pid = int(pid_text)
    assert sv.is_alive(pid, float(create_time_text)), "the engine died with its worker"
    found = [f for f in sv.find_engines() if f.deployment_id == "test-orphaned"]
    assert [f.pgid for f in found] == [pid]
    handle = sv.adopt(pid, "test-orphaned", log_path)
    assert handle is not None and sv.handle_alive(handle)
    result = sv.stop(handle, grace_s=5.0)
    assert result.was_running and result.remaining_pids == ()
    assert result.exit is not None and result.exit.exit_code is None  # not our child
    assert not sv.handle_alive(handle)
