"""Deployments, their GPU leases and their timelines.

State changes go through `Deployment.transition`, a compare-and-set UPDATE plus an event row
(healthchecks' Flip), so a duplicate or late task delivery cannot move a deployment backwards.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from deployments.engines import UnsupportedSpec
from deployments.handoff.snapshot import PlanSnapshot, planned_command
from monitoring.models import DeviceKind, Gpu, Host


class Status(models.TextChoices):
    """Where a deployment row is in its life; `_NEXT` says which moves are allowed."""

    PENDING = "pending", "Pending"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    STOPPING = "stopping", "Stopping"
    STOPPED = "stopped", "Stopped"
    FAILED = "failed", "Failed"
    RESTARTING = "restarting", "Restarting"  # the engine died; a new one starts after a backoff
    # Idle (deployments.host.idle): a vLLM engine asleep, its process alive, most of its GPU
    # memory given back; an engine that cannot sleep stopped, its plan kept to start on demand.
    SLEEPING = "sleeping", "Sleeping"
    SCALED_TO_ZERO = "scaled_to_zero", "Scaled to zero"


TERMINAL = frozenset({Status.STOPPED, Status.FAILED})
ACTIVE = frozenset(
    {
        Status.PENDING,
        Status.STARTING,
        Status.RUNNING,
        Status.STOPPING,
        Status.RESTARTING,
        Status.SLEEPING,
    }
)
# A scaled-to-zero row has no engine (so it is not ACTIVE: the watchdog and reconcile leave it
# alone) but keeps its name: it starts again under that name on the next request.
HOLDS_NAME = ACTIVE | {Status.SCALED_TO_ZERO}

# Allowed moves; `failed` is reachable from every non-terminal state.
_NEXT: dict[Status, frozenset[Status]] = {
    Status.PENDING: frozenset({Status.STARTING, Status.STOPPING, Status.FAILED}),
    Status.STARTING: frozenset({Status.RUNNING, Status.STOPPING, Status.FAILED, Status.RESTARTING}),
    Status.RUNNING: frozenset({Status.STOPPING, Status.FAILED, Status.RESTARTING, Status.SLEEPING}),
    Status.RESTARTING: frozenset({Status.STARTING, Status.STOPPING, Status.FAILED}),
    Status.STOPPING: frozenset({Status.STOPPED, Status.FAILED, Status.SCALED_TO_ZERO}),
    # not restarting: a sleeping engine's freed bytes may be leased to others meanwhile
    Status.SLEEPING: frozenset({Status.RUNNING, Status.STOPPING, Status.FAILED}),
    # a start on demand goes through the launch's own path (pending, then the host's launch)
    Status.SCALED_TO_ZERO: frozenset({Status.PENDING, Status.STOPPING, Status.FAILED}),
    Status.STOPPED: frozenset(),
    Status.FAILED: frozenset(),
}


def can_move(old: Status, new: Status) -> bool:
    return new in _NEXT[old]


class Engine(models.TextChoices):
    """The engine a deployment runs: one adapter each in deployments.engines."""

    VLLM = "vllm", "vLLM"
    TRANSFORMERS = "transformers", "Transformers"
    LLAMACPP = "llamacpp", "llama.cpp"


class Deployment(models.Model):
    """One replica's engine of a launch: its plan (`snapshot`), host, process and state.

    `plan` holds the `PlanSnapshot` written at launch; read it through `snapshot`, never by
    key. What changes after launch is a column (`retired`, the process fields, `status`).
    """

    name = models.SlugField(max_length=63)
    model_id = models.CharField(max_length=300, help_text="Hub id or local path")
    revision = models.CharField(max_length=100, blank=True)
    engine = models.CharField(max_length=20, choices=Engine.choices)
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="deployments")
    plan = models.JSONField(default=dict, help_text="the PlanSnapshot's JSON (snapshot.py)")
    # Queried, so columns, not plan keys: the Ray node watch filters on spans_hosts, group() on
    # retired.
    spans_hosts = models.BooleanField(
        default=False, help_text="one replica over several hosts on a Ray cluster of its own"
    )
    retired = models.BooleanField(
        default=False, help_text="stopped by a scale-down: no longer one of the replicas"
    )
    argv = models.JSONField(default=list, blank=True, help_text="rendered, secrets masked")
    env = models.JSONField(default=dict, blank=True, help_text="rendered, secrets masked")
    port = models.PositiveIntegerField(null=True, blank=True)
    bind_host = models.CharField(max_length=100, blank=True)
    api_key_hash = models.CharField(max_length=64, blank=True)
    hub_token_sealed = models.TextField(
        blank=True, help_text="the launcher's Hub token, encrypted (sealed.py); wiped at the end"
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    failure_reason = models.TextField(blank=True)
    diagnosis = models.JSONField(default=dict, blank=True)
    pid = models.IntegerField(null=True, blank=True)
    pgid = models.IntegerField(null=True, blank=True)
    process_started_at = models.FloatField(null=True, blank=True)
    log_path = models.CharField(max_length=500, blank=True)
    log_tail = models.TextField(
        blank=True, help_text="the engine's last lines, secrets masked, saved when it ended"
    )
    restart_count = models.PositiveIntegerField(default=0, help_text="automatic restarts in a row")
    auto_restart = models.BooleanField(default=False, help_text="restart the engine if it dies")
    restart_at = models.DateTimeField(null=True, blank=True, help_text="next automatic restart")
    sleep_after_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="sleep (or scale to zero) after this long without a request",
    )
    slept_at = models.DateTimeField(null=True, blank=True, help_text="when it last went idle")
    woke_at = models.DateTimeField(null=True, blank=True, help_text="when it last woke or started")
    sleep_level = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="vLLM's sleep level while it sleeps (1 or 2)"
    )
    # A launch of N replicas is N rows: the first (replica 1, ``replica_of`` empty) stands for
    # the deployment on the pages; each row has its own GPUs, engine, port and state.
    replica_of = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="replicas"
    )
    replica_index = models.PositiveSmallIntegerField(default=1, help_text="1 for the first")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="deployments"
    )
    # Empty for a deployment launched before teams, or by a user in no team: no quota applies.
    team = models.ForeignKey(
        "teams.Team",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="deployments",
    )
    over_quota_at = models.DateTimeField(
        null=True, blank=True, help_text="when its team's monthly GPU-hours ran out while it ran"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "replica_index"]
        constraints = [
            models.UniqueConstraint(
                fields=["name", "replica_index"],
                condition=Q(
                    status__in=[
                        "pending",
                        "starting",
                        "running",
                        "stopping",
                        "restarting",
                        "sleeping",
                        "scaled_to_zero",
                    ]
                ),
                name="deployment_active_name_replica_unique",
            ),
            models.CheckConstraint(
                condition=Q(replica_index__gte=1), name="deployment_replica_index_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    @property
    def group_id(self) -> int:
        """The pk of the first replica: the deployment as the pages show it."""
        return self.replica_of_id or self.pk

    def group(self) -> models.QuerySet[Deployment]:
        """Every replica of this launch, the first first, less those a scale-down retired
        (their rows keep their history; lifecycle.scaling)."""
        return (
            Deployment.objects.filter(Q(pk=self.group_id) | Q(replica_of_id=self.group_id))
            .filter(retired=False)
            .order_by("replica_index")
        )

    @property
    def snapshot(self) -> PlanSnapshot:
        """The plan as the launch wrote it: the one way to read `plan`."""
        return PlanSnapshot.from_json(self.plan)

    @property
    def embeds(self) -> bool:
        """An embedding/classification model (vLLM's pooling runner): no chat, no completions."""
        return self.snapshot.embeds

    @property
    def planned_argv(self) -> tuple[str, ...]:
        """The engine command the plan stands for, as a user would run it (no secrets)."""
        try:
            return planned_command(
                self.snapshot, self.engine, model=self.model_id, revision=self.revision
            )
        except UnsupportedSpec:
            return ()  # an engine this release has no adapter for: no command, not an error page

    @property
    def engine_device(self) -> str:
        """Where its engine runs: "cpu" for a plan on the host's CPU, and for every engine of a
        host whose GPUs are simulated (in their place; over several hosts a Ray test engine
        stands in); "gpu" otherwise (engines.platforms: what each engine does there)."""
        if self.snapshot.engine_args.device == "cpu":
            return "cpu"
        return "cpu" if self.host.simulated and not self.spans_hosts else "gpu"

    @property
    def sleep_after_min(self) -> float | None:
        """The idle setting in minutes, as the pages and forms give it."""
        return None if self.sleep_after_s is None else round(self.sleep_after_s / 60, 2)

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE

    @property
    def base_url(self) -> str:
        return f"http://{self.bind_host or '127.0.0.1'}:{self.port}"

    @property
    def served_model_name(self) -> str:
        return self.name

    def engine_api_key(self) -> str:
        """The engine's API key, derived (never stored): web and workers share SECRET_KEY."""
        message = f"shardboard-engine-key:{self.pk}:{self.created_at.isoformat()}".encode()
        return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()

    def transition(self, new: Status, *, reason: str = "", **fields: Any) -> bool:
        """Compare-and-set from the status this instance holds to `new`, plus an event row."""
        old = Status(self.status)
        if not can_move(old, new):
            return False
        changed = {"status": new, "updated_at": timezone.now(), **fields}
        if new in TERMINAL:
            changed["hub_token_sealed"] = ""  # an ended deployment needs no token
        rows = Deployment.objects.filter(pk=self.pk, status=old).update(**changed)
        if rows != 1:
            return False  # another worker got there first
        for key, value in changed.items():
            setattr(self, key, value)
        DeploymentEvent.objects.create(
            deployment=self, old_status=old, new_status=new, reason=reason
        )
        return True


class DeploymentEvent(models.Model):
    """One state change of a deployment row, with its reason: the timeline on its page."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="events")
    old_status = models.CharField(max_length=20, choices=Status.choices, blank=True)
    new_status = models.CharField(max_length=20, choices=Status.choices)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.deployment_id}: {self.old_status} -> {self.new_status}"


class GpuLeaseQuerySet(models.QuerySet["GpuLease"]):
    def on_gpus(self) -> GpuLeaseQuerySet:
        """Leases on GPUs, not on a host's CPU row: what GPU counts and quotas mean."""
        return self.filter(gpu__kind=DeviceKind.GPU)


class GpuLease(models.Model):
    """A deployment's reservation of ``memory_bytes`` on a GPU (or on a host's CPU row: RAM).

    Several deployments may share a GPU while their active reservations fit into its total;
    the launch service checks that sum with the GPU rows locked (lifecycle.services), which a
    row constraint cannot express.
    """

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="leases")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="leases")
    memory_bytes = models.BigIntegerField(default=0, help_text="bytes reserved on this GPU")
    # While its engine sleeps a lease counts only these bytes (the CUDA context and what vLLM
    # does not give back); the rest of memory_bytes may be leased to others, so a wake takes
    # it back under the same GPU row locks as a launch, or waits (deployments.host.sleepleases).
    asleep_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="bytes still held while the engine sleeps; empty: awake"
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)

    objects = GpuLeaseQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(memory_bytes__gte=0), name="gpu_lease_memory_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(asleep_bytes__isnull=True)
                | Q(asleep_bytes__gte=0, asleep_bytes__lte=models.F("memory_bytes")),
                name="gpu_lease_asleep_within_lease",
            ),
            models.UniqueConstraint(
                fields=["deployment", "gpu"],
                condition=Q(active=True),
                name="gpu_lease_one_active_per_deployment",
            ),
        ]
        indexes = [
            models.Index(fields=["gpu"], condition=Q(active=True), name="gpu_lease_active_gpu")
        ]

    def __str__(self) -> str:
        return f"{self.gpu} -> {self.deployment_id}"


class HubConfig(models.Model):
    """config.json of a Hub repo at a commit: immutable, so cached here for good."""

    repo_id = models.CharField(max_length=200)
    sha = models.CharField(max_length=64)
    config = models.JSONField()
    fetched_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["repo_id", "sha"], name="hubconfig_repo_sha_unique")
        ]

    def __str__(self) -> str:
        return f"{self.repo_id}@{self.sha[:8]}"
