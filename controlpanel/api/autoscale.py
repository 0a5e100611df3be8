"""A deployment's scaling policy through the API: read, set, clear. The page's service, with
the request: the same checks and audit row."""

from typing import Any

from django.http import Http404, HttpRequest
from ninja import Router, Status

from controlpanel.api.auth import DEPLOY, READ, principal
from controlpanel.api.schemas import REFUSALS, Message, ScalingPolicyIn
from deployments.autoscale import selectors, services
from deployments.models import Deployment

router = Router(tags=["deployments"])


class ScalingPolicyOut(ScalingPolicyIn):
    deployment_id: int
    set_by: str
    last_decision: str


def _first(pk: int) -> Deployment:
    d = Deployment.objects.filter(pk=pk).first()
    if d is None:
        raise Http404(f"no deployment {pk}")
    return Deployment.objects.get(pk=d.group_id)


def _out(first: Deployment) -> dict[str, Any]:
    policy = selectors.policy_of(first)
    if policy is None:
        raise Http404(f"deployment {first.pk} has no scaling policy")
    fields = {k: getattr(policy, k) for k in ScalingPolicyIn.model_fields}
    return fields | {
        "deployment_id": first.pk,
        "set_by": policy.set_by.get_username(),
        "last_decision": policy.last_decision,
    }


@router.get(
    "/deployments/{int:pk}/scaling-policy",
    response={200: ScalingPolicyOut, 404: Message, **REFUSALS},
    auth=READ,
)
def policy_read(request: HttpRequest, pk: int) -> dict[str, Any]:
    """The deployment's scaling policy and its latest decision."""
    return _out(_first(pk))


@router.put(
    "/deployments/{int:pk}/scaling-policy",
    response={200: ScalingPolicyOut, 404: Message, 409: Message, **REFUSALS},
    auth=DEPLOY,
)
def policy_put(request: HttpRequest, pk: int, body: ScalingPolicyIn) -> dict[str, Any]:
    """Set (or replace) the policy; the autoscaler follows it from its next pass."""
    first = _first(pk)
    services.policy_set(
        user=principal(request).user,
        deployment=first,
        settings=services.PolicySettings(**body.dict()),
        http_request=request,
    )
    return _out(first)


@router.delete(
    "/deployments/{int:pk}/scaling-policy",
    response={204: None, 404: Message, 409: Message, **REFUSALS},
    auth=DEPLOY,
)
def policy_delete(request: HttpRequest, pk: int) -> Status[None]:
    """Turn autoscaling off: the replicas stay as they are."""
    services.policy_clear(user=principal(request).user, deployment=_first(pk), http_request=request)
    return Status(204, None)
