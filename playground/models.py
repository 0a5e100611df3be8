"""Personal API tokens for the /v1/ gateway, and the per-user history of playground runs."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Scope(models.TextChoices):
    """What a token may do; the user's role still bounds it (a viewer's deploy token deploys
    nothing)."""

    READ = "read", "Read: deployments, hosts, GPUs, plans, usage"
    DEPLOY = "deploy", "Deploy: launch, stop and scale deployments"
    INFER = "infer", "Infer: the OpenAI-compatible /v1/ gateway"
    AUDIT = "audit", "Audit: read the audit trail"


class ApiToken(models.Model):
    """A user's personal API token: made and revoked on the Tokens page
    (``playground.services``), its limits set there too (``playground.token_limits``), its
    last use written by whoever authenticates with it (``playground.tokens``). Only the
    SHA-256 of the token is stored; the token itself is shown once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="playground_tokens"
    )
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=16, help_text="first characters, for display")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Space-separated, as OAuth writes scopes. Tokens made before scopes existed were /v1/
    # tokens, as the playground's still are: "infer".
    scopes = models.CharField(max_length=64, default=Scope.INFER.value)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="blank: never")
    # Blank: the global setting (GATEWAY_RPM_PER_TOKEN, GATEWAY_TOKENS_PER_DAY_PER_TOKEN).
    rpm_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="requests per minute on /v1/; blank: the global setting"
    )
    tokens_per_day_limit = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="tokens per UTC day on /v1/; blank: the global setting"
    )
    # Requests in flight at once with this token: its own slots, not its owner's per-user ones.
    max_concurrent = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="concurrent /v1/ requests; blank: PLAYGROUND_MAX_CONCURRENT",
    )

    # Space-separated model names in /v1/ (deployments or LoRA adapters); blank: any.
    allowed_models = models.CharField(
        max_length=2000, blank=True, help_text="models this token may use in /v1/; blank: any"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and not self.is_expired

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def scope_list(self) -> list[str]:
        return self.scopes.split()

    def allows(self, scope: str) -> bool:
        return scope in self.scope_list


class Mode(models.TextChoices):
    CHAT = "chat", "Chat"
    COMPLETION = "completion", "Completion"


class PlaygroundRun(models.Model):
    """One request made from the playground page and its answer and timings, written by the
    gateway after the answer (``gateway.rows.run_row``, saved by ``gateway.dbwork``)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="playground_runs"
    )
    deployment_name = models.CharField(max_length=63)
    mode = models.CharField(max_length=20, choices=Mode.choices)
    parameters = models.JSONField(default=dict, blank=True)
    messages = models.JSONField(default=list, blank=True, help_text="chat mode")
    prompt = models.TextField(blank=True, help_text="completion mode")
    answer = models.TextField(blank=True)
    status = models.CharField(max_length=32)
    error = models.TextField(blank=True)
    server_timings = models.JSONField(default=dict, blank=True)
    browser_timings = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.user_id} {self.deployment_name} {self.mode} {self.status}"
