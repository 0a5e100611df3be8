"""``python manage.py demo_deployment``: `make run`'s demo deployment, in the background.

Says in the terminal as each engine of this host becomes ready (the host worker prepares them),
generates the demo model once its generator (torch, with the transformers engine) is there,
launches the demo on the first engine ready and moves it to vLLM when vLLM is ready, or says
how to. Ends once nothing is left to prepare.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from deployments.lifecycle import demo
from deployments.lifecycle.errors import DeploymentError
from deployments.models import Deployment, EnginePrep, PrepState, Status
from monitoring.models import Host

POLL_S = 2.0
HOST_WAIT_S = 300.0
STOP_WAIT_S = 120.0


class Command(BaseCommand):
    help = "Launch the demo deployment on this machine's first engine ready; move it to vLLM."

    def handle(self, *args: Any, **options: Any) -> None:
        self.began = float(os.environ.get("SHARDBOARD_RUN_STARTED", time.time()))
        host = self.wait_for_host()
        if host is None:
            self.say(f"the host worker {settings.SHARDBOARD_HOST_NAME!r} did not register")
            return
        said: dict[str, str] = {}
        done = demo.Progress()
        while True:
            self.report(host, said)
            step = demo.next_step(demo.engines(host), demo.current(), done)
            if step == "done":
                return
            if step == "wait":
                time.sleep(POLL_S)
                continue
            done = self.act(step, host, done)

    def act(self, step: str, host: Host, done: demo.Progress) -> demo.Progress:
        if step == "make_model":
            self.make_model()
            return demo.Progress(True, done.launched, done.moved)
        if step.startswith("launch:"):
            engine = step.split(":", 1)[1]
            d = self.launch(host, engine)
            # A host that runs vLLM launches on another engine: there is nothing to move to.
            swapped = d is not None and d.engine != engine
            return demo.Progress(done.model_made, True, done.moved or swapped)
        if step == "move":
            self.move(host)
        else:
            self.explain(host)
        return demo.Progress(done.model_made, done.launched, True)

    def wait_for_host(self) -> Host | None:
        deadline = time.monotonic() + HOST_WAIT_S
        while time.monotonic() < deadline:
            if host := Host.objects.filter(name=settings.SHARDBOARD_HOST_NAME).first():
                return host
            time.sleep(POLL_S)
        return None

    def report(self, host: Host, said: dict[str, str]) -> None:
        """One line per engine each time its state changes."""
        for row in EnginePrep.objects.filter(host=host):
            if said.get(row.engine) == row.state:
                continue
            said[row.engine] = row.state
            name = row.get_engine_display()
            if row.state == PrepState.PREPARING:
                self.say(f"preparing {name} in the background (progress on the dashboard)")
            elif row.state == PrepState.READY:
                took = ""
                if row.started_at and row.finished_at:
                    took = (
                        f", prepared in {(row.finished_at - row.started_at).total_seconds():.0f} s"
                    )
                self.say(f"{name} is ready{took}")
            elif row.state == PrepState.FAILED:
                self.say(f"{name} could not be prepared: {row.error} (retry on the dashboard)")

    def make_model(self) -> None:
        done = subprocess.run(  # noqa: S603 - our own command, an argv list
            [sys.executable, str(settings.BASE_DIR / "manage.py"), "demo_model"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            self.say(f"could not generate the demo model: {done.stderr.strip()[-500:]}")

    def launch(self, host: Host, engine: str) -> Deployment | None:
        try:
            d = demo.launch(host=host, engine=engine)
        except DeploymentError as exc:
            self.say(f"the demo deployment was not launched: {exc}")
            return None
        self.say(
            f"launched the demo deployment {d.name!r} on {d.get_engine_display()}{self.where()}"
        )
        return d

    def move(self, host: Host) -> None:
        old = demo.current()
        if old is None:
            return
        label = old.get_engine_display()
        try:
            demo.stop(old)
            self.wait_stopped(old)
            d = demo.launch(host=host, engine="vllm")
        except DeploymentError as exc:
            self.say(f"the demo deployment was not moved to vLLM: {exc}")
            return
        if d.engine != "vllm":
            self.say(f"this host runs a vLLM launch on {d.get_engine_display()} (simulated GPUs)")
            return
        self.say(f"vLLM is ready: moved the demo deployment from {label} to vLLM{self.where()}")

    def wait_stopped(self, d: Deployment) -> None:
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            if not d.group().exclude(status__in=[Status.STOPPED, Status.FAILED]).exists():
                return
            time.sleep(0.5)
        raise DeploymentError(f"{d.name} did not stop within {STOP_WAIT_S:.0f} s")

    def explain(self, host: Host) -> None:
        d = demo.current()
        if d is None:
            return
        self.say(
            f"the demo deployment stays on {d.get_engine_display()}: vLLM is not ready on "
            f"{host.name}. To move it: retry vLLM on the dashboard (Engines), then stop "
            "'demo' and launch it again with the engine vLLM."
        )

    def where(self) -> str:
        bind = os.environ.get("SHARDBOARD_BIND", "127.0.0.1")
        port = os.environ.get("SHARDBOARD_PORT", "8000")
        return f" (playground: http://{bind}:{port}/playground/)"

    def say(self, text: str) -> None:
        after = time.time() - self.began
        self.stdout.write(f"==> [{after:5.0f} s] {text}")
        self.stdout.flush()
