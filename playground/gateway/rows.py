"""The rows one gateway request leaves: its audit row and, for the playground page, its run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from controlpanel.audit import audit_event
from controlpanel.models import AuditEvent
from playground.gateway.payload import GatewayCall, LengthCap, prompt_of
from playground.models import Mode, PlaygroundRun

_NOT_PARAMETERS = frozenset({"model", "messages", "prompt", "stream", "stream_options"})


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one gateway request ended."""

    status: str  # ok | client_disconnected | engine_error | engine_unreachable | ...
    http_status: int
    timings: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    answer: str = ""


def gateway_audit_row(
    *,
    user: Any,
    via: str,
    call: GatewayCall | None,
    deployment: tuple[int, str] | None,
    outcome: Outcome,
    length: LengthCap | None = None,
    ip: str | None = None,
    bearer_id: str = "",
    adapter: str = "",
) -> AuditEvent:
    """The audit row of one gateway request, not yet saved (playground.gateway.dbwork inserts
    them in groups). Keys avoid 'token': the audit scrubber masks those."""
    detail: dict[str, Any] = {
        "deployment": deployment[1] if deployment else (call.model if call else ""),
        "endpoint": call.path if call else "",
        "via": "bearer" if via == "token" else via,
        "stream": call.stream if call else False,
        "status": outcome.status,
        "http_status": outcome.http_status,
        **_timing_detail(outcome.timings),
    }
    if adapter:  # a LoRA adapter of the deployment answered (the request's model)
        detail["adapter"] = adapter
    if bearer_id:  # which API token (usage by token); not a secret: a hash's first characters
        detail["bearer_id"] = bearer_id
    if length is not None:
        detail["length"] = {"asked": length.asked, "sent": length.sent}
    if outcome.error:
        detail["error"] = outcome.error[:2000]
    if settings.AUDIT_PROMPTS and call is not None:
        detail["prompt"] = prompt_of(call)
    return audit_event(
        actor=user,
        action="playground.request",
        target_type="deployment",
        target_id=deployment[0] if deployment else "",
        detail=detail,
        ip=ip,
    )


def _timing_detail(timings: dict[str, Any]) -> dict[str, Any]:
    if not timings:
        return {}
    return {
        "ttft_ms": timings.get("ttft_ms"),
        "duration_ms": timings.get("duration_ms"),
        "rate_per_s": timings.get("tokens_per_s"),
        "usage": {
            "prompt": timings.get("prompt_tokens"),
            "completion": timings.get("completion_tokens"),
        },
    }


def run_row(
    *, user: Any, deployment_name: str, call: GatewayCall, outcome: Outcome
) -> PlaygroundRun:
    """The playground page's run of one gateway request, not yet saved (see gateway_audit_row)."""
    body = call.body
    chat = call.kind == "chat"
    return PlaygroundRun(
        user=user,
        deployment_name=deployment_name[:63],
        mode=Mode.CHAT if chat else Mode.COMPLETION,
        parameters={k: v for k, v in body.items() if k not in _NOT_PARAMETERS},
        messages=(body.get("messages") or []) if chat else [],
        prompt="" if chat else _storable(_prompt_text(body.get("prompt"))),
        answer=_storable(outcome.answer),
        status=outcome.status,
        error=outcome.error[:2000],
        server_timings=outcome.timings,
    )


def _prompt_text(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else "\n".join(str(p) for p in prompt or ())


def _storable(text: str) -> str:
    """PostgreSQL text cannot hold NUL, and a model may emit that token (a random-weight demo
    does): shown as U+FFFD, so the run is still saved."""
    return text.replace("\x00", "\ufffd")
