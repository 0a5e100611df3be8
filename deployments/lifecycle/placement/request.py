"""What a launch asks for (`LaunchRequest`) and where it goes (`Placed`): the two ends of the
one placement interface (lifecycle.placement)."""

from __future__ import annotations

from dataclasses import dataclass, field

from deployments import planning
from deployments.catalog.gguf_plan import GgufOptions
from deployments.catalog.gguf_sources import GgufSource
from deployments.catalog.sources import ModelSource
from deployments.handoff.snapshot import PlanSnapshot
from deployments.lifecycle.policy import PolicySettings
from deployments.models import Engine
from monitoring.models import Host

# (host name, device index) → bytes one replica leases there
Leases = dict[tuple[str, int], int]


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    name: str
    model_ref: str
    host_name: str
    engine: str = Engine.VLLM
    revision: str = ""
    plan_request: planning.PlanRequest = field(default_factory=planning.PlanRequest)
    gpu_indices: tuple[int, ...] | None = None
    auto_restart: bool | None = None  # None: the server's SHARDBOARD_AUTO_RESTART
    # Replicas of the layout, each its own engine on its own GPUs; None: as many as fit.
    # The planner's ``plan_request.replicas`` is ignored: this field decides.
    replicas: int | None = 1
    # Further hosts the model may span (one replica, vLLM on a Ray cluster of its own); the
    # engine runs on the host of its first pipeline stage.
    hosts: tuple[str, ...] = ()
    team: str | None = None  # None: the user's only team (or none, for a user in no team)
    llamacpp: GgufOptions | None = None  # llama.cpp's own settings (the GGUF plan panel's)
    # Sleep (vLLM on a GPU) or scale to zero after this long without a request; None: never
    # (lifecycle.idle; engines.platforms says which engine sleeps where).
    sleep_after_s: int | None = None
    scaling_policy: PolicySettings | None = None  # created with it (lifecycle.launch_policy)


@dataclass(frozen=True, slots=True)
class Placed:
    """A launch's (or a scale-up's) placement: the rows, their leases and the engine's
    settings are written from it, whatever the engine."""

    engine: str
    source: ModelSource | GgufSource
    lead: Host  # runs the engine (over several hosts: the first stage's)
    # The engine's settings; `gpus` holds every replica's devices, `per_gpu` one replica's bytes.
    snapshot: PlanSnapshot
    hub_token: str | None = None  # the launcher's, where the host fetches from the Hub

    @property
    def replicas(self) -> int:
        return max(len(self.snapshot.gpus), 1)

    @property
    def spans_hosts(self) -> bool:
        return self.snapshot.engine_args.spans_hosts

    def leases(self) -> list[Leases]:
        return leases(self.snapshot, self.lead.name)


def leases(snapshot: PlanSnapshot, host_name: str) -> list[Leases]:
    """Per replica of `snapshot.gpus`, the bytes it reserves on each of its devices (a GPU, or
    the host's CPU row for its RAM): the plan's figure there, the same on every replica (each
    runs the first one's command). A device without a host name is `host_name`'s."""
    return [
        {
            (slot.host or host_name, slot.index): figures.total_bytes
            for slot, figures in zip(slots, snapshot.per_gpu, strict=True)
        }
        for slots in snapshot.gpus
    ]
