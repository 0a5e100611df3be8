"""`make run`'s demo deployment: what it does next, from this host's engines and the demo's row
(deployments.lifecycle.demo.next_step; the command runs it in a loop)."""

from __future__ import annotations

import pytest

from deployments.lifecycle.demo import Engines, Progress, next_step
from deployments.models import Deployment

P, R, F, A = "preparing", "ready", "failed", "absent"


def engines(transformers: str, vllm: str, llamacpp: str = P) -> Engines:
    return Engines({"transformers": transformers, "vllm": vllm, "llamacpp": llamacpp})


def demo(engine: str, status: str = "running") -> Deployment:
    return Deployment(name="demo", engine=engine, status=status)


@pytest.mark.parametrize(
    ("host", "current", "done", "step"),
    [
        # the demo model needs torch, which comes with the transformers engine
        (engines(P, R), None, Progress(), "wait"),
        (engines(R, P), None, Progress(), "make_model"),
        (engines(F, F, F), None, Progress(), "done"),
        # then the first engine ready carries it, vLLM first
        (engines(R, P), None, Progress(model_made=True), "launch:transformers"),
        (engines(R, R), None, Progress(model_made=True), "launch:vllm"),
        (engines(R, P, R), None, Progress(model_made=True), "launch:transformers"),
        # moved to vLLM once vLLM is ready and the demo runs
        (engines(R, P), demo("transformers"), Progress(True, True), "wait"),
        (engines(R, R), demo("transformers", "starting"), Progress(True, True), "wait"),
        (engines(R, R), demo("transformers"), Progress(True, True), "move"),
        (engines(R, R, P), demo("vllm"), Progress(True, True), "wait"),
        (engines(R, R, R), demo("vllm"), Progress(True, True), "done"),
        # vLLM will not come: say how to move it, once
        (engines(R, F), demo("transformers"), Progress(True, True), "explain"),
        (engines(R, A, R), demo("transformers"), Progress(True, True, moved=True), "done"),
        # a demo the user stopped is not launched again
        (engines(R, R, R), None, Progress(True, True), "done"),
    ],
)
def test_next_step(host: Engines, current: Deployment | None, done: Progress, step: str) -> None:
    assert next_step(host, current, done) == step
