"""`make run`'s demo deployment: the demo model, launched on this machine's first engine that is
ready, and moved to vLLM once vLLM is ready (`manage.py demo_deployment` drives it).

Every step is the ordinary write path (deployment_create, deployment_stop) under the admin
account `make run` made, so each is an audit row like a click would be.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from django.contrib.auth import get_user_model

from deployments.catalog.demo_model import DEMO_GGUF, DEMO_MODEL_DIR
from deployments.lifecycle import engineprep, services
from deployments.models import HOLDS_NAME, Deployment, Engine, PrepState
from monitoring.models import Host

NAME = "demo"
# The first of these that is ready carries the demo; vLLM is where it belongs.
PREFERENCE = (Engine.VLLM, Engine.TRANSFORMERS, Engine.LLAMACPP)


@dataclass(frozen=True, slots=True)
class Engines:
    """This host's engines as its worker reported them."""

    states: dict[str, str]

    def first_ready(self) -> str | None:
        return next((e for e in PREFERENCE if self.states.get(e) == PrepState.READY), None)

    def state(self, engine: str) -> str:
        return self.states.get(engine, "")

    @property
    def settled(self) -> bool:
        """Nothing is being prepared any more (every engine ready, failed or left out)."""
        return bool(self.states) and PrepState.PREPARING not in self.states.values()


def engines(host: Host) -> Engines:
    rows = engineprep.host_engines([host.name])
    return Engines({r.engine: r.state for group in rows for r in group.rows})


def current() -> Deployment | None:
    """The demo deployment that holds the name (any state but stopped or failed)."""
    return Deployment.objects.filter(
        name=NAME, status__in=list(HOLDS_NAME), replica_of__isnull=True
    ).first()


def model_ref(engine: str) -> str:
    if engine == Engine.LLAMACPP:
        return f"local:0/{DEMO_GGUF}"
    return f"local:0/{DEMO_MODEL_DIR}"


def launch(*, host: Host, engine: str, user: object | None = None) -> Deployment:
    request = services.LaunchRequest(
        name=NAME, model_ref=model_ref(engine), host_name=host.name, engine=engine
    )
    return services.deployment_create(user=user or admin(), request=request)


def stop(deployment: Deployment, *, user: object | None = None) -> Deployment:
    return services.deployment_stop(user=user or admin(), deployment=deployment)


def admin() -> object:
    """The account `make run` made (ensure_admin: SHARDBOARD_ADMIN_USER, default admin)."""
    return get_user_model().objects.get(username=os.environ.get("SHARDBOARD_ADMIN_USER", "admin"))


@dataclass(frozen=True, slots=True)
class Progress:
    """What the demo command has done so far in this `make run`."""

    model_made: bool = False
    launched: bool = False  # launched once: a demo the user stops is not launched again
    moved: bool = False  # moved to vLLM, or said why not: once


def next_step(engines: Engines, demo: Deployment | None, done: Progress) -> str:
    """What to do now: "make_model" (its generator, torch, comes with the transformers engine),
    "launch:<engine>", "move" (to vLLM), "explain" (vLLM will not come: say how to move it),
    "wait" or "done"."""
    if not done.model_made:
        if engines.state(Engine.TRANSFORMERS) == PrepState.READY:
            return "make_model"
        return "done" if engines.settled else "wait"
    if demo is None and not done.launched:
        first = engines.first_ready()
        return f"launch:{first}" if first else ("done" if engines.settled else "wait")
    on_vllm = demo is not None and demo.engine == Engine.VLLM
    if demo is None or on_vllm or done.moved:
        return "done" if engines.settled else "wait"
    if engines.state(Engine.VLLM) == PrepState.READY:
        return "move" if demo.status == "running" else "wait"
    if engines.state(Engine.VLLM) in (PrepState.FAILED, PrepState.ABSENT):
        return "explain"
    return "wait"
