"""A real host worker prepares its engines in the background (fake scripts stand in for the
8-minute build, tests/support/fake_prep.py): progress into the row as the script prints it, a
failure with the script's own reason, an operator's retry (audited) that prepares it, a launch
refused while its engine failed, and an engine this worker does not prepare reported as such."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controlpanel.models import AuditEvent
from deployments.catalog.gguf_write import convert_demo
from deployments.lifecycle import engineprep, services
from deployments.models import EnginePrep, PrepState
from tests.support.fake_prep import FakeScripts, fake_scripts
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.worker]
HOST = "prep-host"
GGUF = "local:0/demo/demo-Q8_0.gguf"


def _row(engine: str) -> EnginePrep | None:
    return EnginePrep.objects.filter(host__name=HOST, engine=engine).first()


def _state(engine: str, state: str, **fields: Any) -> EnginePrep | None:
    row = _row(engine)
    if row is None or row.state != state:
        return None
    return row if all(getattr(row, k) == v for k, v in fields.items()) else None


@pytest.fixture
def scripts(tmp_path: Path) -> FakeScripts:
    made = fake_scripts(tmp_path / "scripts", {"llamacpp": "/usr/bin/true"})
    made.ready("vllm", "/usr/bin/true")
    made.ready("transformers", "/usr/bin/true")
    return made


def _worker(host_worker: Any, model_root: Path, scripts: FakeScripts, prepare: str) -> Any:
    return start_sim_worker(
        host_worker,
        HOST,
        model_root,
        SHARDBOARD_ENGINE_SCRIPTS_DIR=str(scripts.folder),
        SHARDBOARD_PREPARE_ENGINES=prepare,
    )


def test_progress_is_recorded_as_the_script_prints_it_then_ready(
    host_worker: Any, model_root: Path, scripts: FakeScripts
) -> None:
    _worker(host_worker, model_root, scripts, "llamacpp")
    row = wait_for(lambda: _state("llamacpp", PrepState.PREPARING, done=45))
    assert (row.phase, row.total, row.unit) == ("Building llama-server (fake)", 100, "%")
    assert row.progress_text == "45 %" and row.started_at is not None and row.attempt == 1
    wait_for(lambda: "compiling something/file.cpp" in (_row("llamacpp") or row).log_tail)
    wait_for(lambda: _state("vllm", PrepState.READY, executable="/usr/bin/true"))
    assert _state("vllm", PrepState.READY, note="prepared earlier")

    scripts.open_gate("llamacpp")
    done = wait_for(lambda: _state("llamacpp", PrepState.READY))
    assert done.executable == "/usr/bin/true" and done.error == ""
    assert done.finished_at is not None and done.finished_at >= done.started_at
    assert scripts.attempts("llamacpp") == 1


def test_a_failure_shows_the_reason_refuses_launches_and_a_retry_prepares_it(
    host_worker: Any, model_root: Path, scripts: FakeScripts, operator: Any, viewer: Any
) -> None:
    scripts.fail_with("llamacpp", "building llama-server failed")
    _worker(host_worker, model_root, scripts, "llamacpp")
    failed = wait_for(lambda: _state("llamacpp", PrepState.FAILED))
    assert failed.error == "building llama-server failed"
    assert "compiling something/file.cpp" in failed.log_tail

    convert_demo(model_root / "tiny", model_root / "demo" / "demo-Q8_0.gguf")
    request = services.LaunchRequest(
        name="waits-not", model_ref=GGUF, host_name=HOST, engine="llamacpp"
    )
    with pytest.raises(services.DeploymentError, match="could not be prepared on prep-host"):
        services.deployment_create(user=operator, request=request)

    with pytest.raises(services.DeploymentError, match="does not allow"):
        engineprep.engine_prep_retry(user=viewer, host_name=HOST, engine="llamacpp")
    scripts.fail_with("llamacpp", None)
    scripts.open_gate("llamacpp")
    engineprep.engine_prep_retry(user=operator, host_name=HOST, engine="llamacpp")
    ready = wait_for(lambda: _state("llamacpp", PrepState.READY))
    assert ready.attempt == 2 and ready.error == "" and scripts.attempts("llamacpp") == 2
    audit = AuditEvent.objects.get(action="engine.prepare_retry")
    assert audit.actor == operator
    assert audit.detail["engine"] == "llamacpp" and audit.detail["was"] == "failed"
    assert audit.detail["error"] == "building llama-server failed"

    with pytest.raises(services.DeploymentError, match="is ready on prep-host"):
        engineprep.engine_prep_retry(user=operator, host_name=HOST, engine="llamacpp")


def test_an_engine_this_worker_does_not_prepare_is_reported_not_installed(
    host_worker: Any, model_root: Path, scripts: FakeScripts, operator: Any
) -> None:
    _worker(host_worker, model_root, scripts, "")
    row = wait_for(lambda: _state("llamacpp", PrepState.ABSENT))
    assert "SHARDBOARD_PREPARE_ENGINES" in row.note and scripts.attempts("llamacpp") == 0
    wait_for(lambda: _state("transformers", PrepState.READY))  # each engine in its own thread
    problem = engineprep.launch_problem(row.host, "llamacpp")
    assert problem is not None and "is not installed on prep-host" in problem
