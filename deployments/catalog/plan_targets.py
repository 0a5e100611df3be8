"""Where the plan panel plans: one registered host, several of them (all online hosts, or the
ones picked), or a what-if GPU spec."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from deployments import planning
from deployments.catalog import registered
from deployments.catalog.sources import ModelSourceError
from deployments.models import GpuLease
from monitoring.models import Host

DEFAULT_WHATIF = "4x80GiB@nvlink"
WHATIF = "whatif"
FLEET = "fleet"  # every online host in service
PICKED = "picked"  # the hosts named in ``hosts``, online or not
MAX_PICKED = 64
NAME_MAX = 100  # Host.name's column


@dataclass(frozen=True, slots=True)
class HostChoice:
    """A registered host as a plan target: whether it answers and how many GPUs are free."""

    host: Host
    online: bool
    gpus: int
    free_gpus: int

    @property
    def label(self) -> str:
        # "free": no reservation at all; a partly reserved GPU still takes right-sized shares
        state = f"{self.free_gpus} of {self.gpus} GPUs free" if self.online else "offline"
        sim = ", simulated" if self.host.simulated else ""
        return f"{self.host.name} ({state}{sim})"


def host_choices() -> list[HostChoice]:
    """Hosts in service: online ones first, the most free GPUs first."""
    now = timezone.now()
    hosts = list(Host.objects.in_service().with_gpus())
    reserved = set(
        GpuLease.objects.filter(active=True, gpu__host__in=hosts).values_list("gpu_id", flat=True)
    )
    choices = []
    for host in hosts:
        present = [g for g in host.gpus.all() if g.present]
        free = sum(1 for g in present if g.pk not in reserved)
        choices.append(HostChoice(host, host.is_online(now), len(present), free))
    return sorted(choices, key=lambda c: (not c.online, -c.free_gpus, c.host.name))


def fleet_label(choices: list[HostChoice]) -> str:
    online = [c for c in choices if c.online]
    free = sum(c.free_gpus for c in online)
    gpus = sum(c.gpus for c in online)
    hosts = f"{len(online)} host{'' if len(online) == 1 else 's'}"
    return f"All online hosts ({hosts}, {free} of {gpus} GPUs free)"


def default_target(choices: list[HostChoice]) -> PlanTarget:
    """The online host with the most free GPUs; a what-if inventory when none is online."""
    first = next((c for c in choices if c.online), None)
    return PlanTarget(first.host, "") if first else PlanTarget(None, DEFAULT_WHATIF)


@dataclass(frozen=True, slots=True)
class PlanTarget:
    """Where to plan: a registered host, several (``group``), or a what-if GPU spec."""

    host: Host | None
    gpus_spec: str
    group: tuple[Host, ...] = ()
    fleet: bool = False  # the group is every online host

    @property
    def hosts(self) -> tuple[Host, ...]:
        """The registered hosts planned on, in the order the planner sees them."""
        return self.group or ((self.host,) if self.host else ())

    @property
    def label(self) -> str:
        if self.group:
            names = ", ".join(h.name for h in self.group)
            return f"all online hosts ({names})" if self.fleet else f"hosts {names}"
        return self.host.name if self.host else f"what-if {self.gpus_spec}"

    @property
    def simulated(self) -> bool:
        return any(h.simulated for h in self.hosts)

    @property
    def online(self) -> bool:
        """What-if inventories are always plannable; hosts are launched on only while every
        one of them answers."""
        return not self.offline

    @property
    def offline(self) -> list[str]:
        now = timezone.now()
        return [h.name for h in self.hosts if not h.is_online(now)]

    def inventory(self, device: str = "gpu") -> planning.Inventory:
        """The hosts' devices; a what-if spec is GPUs (``4x80GiB``), or a CPU (``8x64GiB``:
        cores x RAM) when planning on the CPU."""
        if self.hosts:
            return planning.Inventory(tuple(registered.planner_host(h) for h in self.hosts))
        if device == "cpu":
            return planning.parse_cpu(self.gpus_spec, host="what-if")
        return planning.parse_gpus(self.gpus_spec, host="what-if")


def plan_target(target: str, gpus_spec: str, names: list[str] | None = None) -> PlanTarget:
    """The target the panel's fields name; an unknown or retired host is a clear refusal."""
    if not target or target == WHATIF:
        return PlanTarget(None, gpus_spec.strip() or DEFAULT_WHATIF)
    if target == FLEET:
        now = timezone.now()
        hosts = [h for h in Host.objects.in_service().order_by("name") if h.is_online(now)]
        if not hosts:
            raise ModelSourceError(
                "No host is online: pick an offline host or what-if GPUs to plan on."
            )
        return PlanTarget(None, "", tuple(hosts), fleet=True)
    if target == PICKED:
        return PlanTarget(None, "", _picked(names or []))
    host = Host.objects.in_service().filter(name=target).first()
    if host is None:
        raise ModelSourceError(f"There is no registered host {target!r}: pick one from the list.")
    return PlanTarget(host, "")


def _picked(names: list[str]) -> tuple[Host, ...]:
    wanted = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not wanted:
        raise ModelSourceError("Pick at least one host to plan on.")
    if len(wanted) > MAX_PICKED:
        raise ModelSourceError(f"Pick at most {MAX_PICKED} hosts.")
    if any(len(n) > NAME_MAX for n in wanted):
        raise ModelSourceError(f"A host name is at most {NAME_MAX} characters.")
    found = {h.name: h for h in Host.objects.in_service().filter(name__in=wanted)}
    missing = [n for n in wanted if n not in found]
    if missing:
        raise ModelSourceError(
            f"There is no registered host {missing[0]!r} (or it is retired): pick hosts from "
            "the list."
        )
    return tuple(found[n] for n in wanted)
