"""LoRA adapters of a running vLLM deployment through the API: list, load, unload. Each write
calls the service the deployment page calls, with the request, so its checks and audit row are
the page's own."""

from typing import Any

from django.http import HttpRequest
from ninja import Router, Status

from controlpanel.api.auth import DEPLOY, READ, principal
from controlpanel.api.deployments import _first
from controlpanel.api.schemas import REFUSALS, AdapterIn, AdapterOut, Message
from deployments.catalog.selectors import session_hub_token
from deployments.lifecycle import adapter_selectors, adapters

router = Router(tags=["adapters"])


@router.get(
    "/deployments/{int:pk}/adapters",
    response={200: list[AdapterOut], 404: Message, **REFUSALS},
    auth=READ,
)
def adapter_list(request: HttpRequest, pk: int) -> list[dict[str, Any]]:
    """The adapters loaded or loading on the deployment, with each replica's state."""
    first = _first(pk)
    return [adapter_selectors.adapter_out(r) for r in adapter_selectors.adapters_of(first)]


@router.post(
    "/deployments/{int:pk}/adapters",
    response={202: AdapterOut, 404: Message, 409: Message, **REFUSALS},
    auth=DEPLOY,
)
def adapter_load(request: HttpRequest, pk: int, body: AdapterIn) -> Status[dict[str, Any]]:
    """Load a LoRA adapter (local:<root>/<path> or a Hub id) on every replica, no restart;
    checked against the model first. Its name is then a model name in /v1/."""
    adapter = adapters.adapter_load(
        user=principal(request).user,
        deployment=_first(pk),
        name=body.name,
        source=body.source,
        revision=body.revision,
        http_request=request,
        hub_token=session_hub_token(request.session),
    )
    return Status(202, _out(pk, adapter.name))


@router.delete(
    "/deployments/{int:pk}/adapters/{name}",
    response={202: AdapterOut, 404: Message, 409: Message, **REFUSALS},
    auth=DEPLOY,
)
def adapter_unload(request: HttpRequest, pk: int, name: str) -> Status[dict[str, Any]]:
    """Unload an adapter from every replica: requests for it get 404 at once, streams already
    running on it finish."""
    adapter = adapters.adapter_unload(
        user=principal(request).user, deployment=_first(pk), name=name, http_request=request
    )
    return Status(202, _out(pk, adapter.name))


def _out(pk: int, name: str) -> dict[str, Any]:
    first = _first(pk)
    rows = adapter_selectors.adapters_of(first, ended=True)
    out = adapter_selectors.adapter_out(next(r for r in rows if r.adapter.name == name))
    return {**out, "note": adapters.slots_note(first, adapters.lora_of(first))}
