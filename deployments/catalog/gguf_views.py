"""The GGUF model pages (a local ``.gguf``, a Hub repo's quantizations) and their plan JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from controlpanel.roles import Role, role_required
from deployments import planning
from deployments.catalog import commands
from deployments.catalog import gguf_selectors as gsel
from deployments.catalog import plan_targets as targets
from deployments.catalog.gguf_panel import GGUF_WHATIF, GGUF_WHATIFS, default_name, gguf_panel
from deployments.catalog.gguf_plan import CACHE_TYPES, GgufOptions, parse_tensor_split
from deployments.catalog.hub import HubError
from deployments.catalog.selectors import human_bytes
from deployments.catalog.sources import ModelSourceError, check_hub_id
from deployments.catalog.views import hub_status

SPLIT_MODES = ("layer", "row")


class GgufPlanForm(forms.Form):
    """The llama.cpp fields of the plan panel; the API's plan query carries the same names."""

    ref = forms.CharField(max_length=300)
    revision = forms.CharField(required=False, max_length=100)
    target = forms.CharField(required=False, max_length=100)
    gpus = forms.CharField(required=False, max_length=60)
    context_tokens = forms.IntegerField(required=False, min_value=1, max_value=1 << 24)
    slots = forms.IntegerField(required=False, min_value=1, max_value=256)
    cache_type_k = forms.ChoiceField(required=False, choices=[(c, c) for c in CACHE_TYPES])
    cache_type_v = forms.ChoiceField(required=False, choices=[(c, c) for c in CACHE_TYPES])
    flash_attn = forms.ChoiceField(required=False, choices=[("on", "on"), ("off", "off")])
    split_mode = forms.ChoiceField(required=False, choices=[(m, m) for m in SPLIT_MODES])
    tensor_split = forms.CharField(required=False, max_length=100)
    allow_partial_offload = forms.BooleanField(required=False)

    def options(self) -> GgufOptions:
        data = self.cleaned_data
        return GgufOptions(
            context_tokens=data["context_tokens"] or 0,
            slots=data["slots"] or 1,
            cache_type_k=data["cache_type_k"] or "f16",
            cache_type_v=data["cache_type_v"] or "f16",
            flash_attn=data["flash_attn"] != "off",
            split_mode=data["split_mode"] or "layer",
            tensor_split=parse_tensor_split(data["tensor_split"]),
            allow_partial_offload=data["allow_partial_offload"],
        )

    def plan(self, session: Any, hosts: Sequence[str] = ()) -> tuple[dict[str, Any], bool]:
        """The GGUF panel's answer; raises ModelSourceError or PlanningError as PlanForm does."""
        data = self.cleaned_data
        source, spec = gsel.resolve(data["ref"], session, data["revision"])
        target = targets.plan_target(data["target"], data["gpus"] or GGUF_WHATIF, list(hosts))
        return gguf_panel(source, spec, target, self.options())

    def first_error(self) -> str:
        field, errors = next(iter(self.errors.items()))
        return str(errors[0]) if field == "__all__" else f"{field.replace('_', ' ')}: {errors[0]}"


def _page(
    request: HttpRequest, ref: str, revision: str, extra: dict[str, Any], status: int = 200
) -> HttpResponse:
    context: dict[str, Any] = {"ref": ref, "plan": None, "arch": [], **extra}
    try:
        source, spec = gsel.resolve(ref, request.session, revision)
    except ModelSourceError as exc:
        context["spec_error"] = str(exc)
        return render(request, "catalog/gguf_detail.html", context, status=status)
    hosts = targets.host_choices()
    target = targets.default_target(hosts)
    if not target.hosts:
        target = targets.PlanTarget(None, GGUF_WHATIF)
    try:
        plan, _ = gguf_panel(source, spec, target, GgufOptions())
    except planning.PlanningError as exc:
        plan = {"ok": False, "error": str(exc), "plan": None, "target": {"label": target.label}}
    context.update(source=source, spec=spec, arch=gsel.architecture_rows(spec), plan=plan)
    context.update(hosts=hosts, target=target, gguf_whatif=GGUF_WHATIF, whatifs=GGUF_WHATIFS)
    context.update(cache_types=CACHE_TYPES, commands=commands.command_blocks(plan))
    context.update(default_name=default_name(source))
    return render(request, "catalog/gguf_detail.html", context, status=status)


def _local_source_ref(root: int, path: str) -> str:
    return f"local:{root}/{path}"


@require_GET
@role_required(Role.VIEWER)
def gguf_local_model(request: HttpRequest, root: int, path: str) -> HttpResponse:
    model = gsel.local_gguf(root, path)
    if model is None:
        message = f"No GGUF model {path!r} in model root {root}."
        return render(request, "catalog/error.html", {"message": message}, status=404)
    extra = {"local": model, "size": human_bytes(model.size_bytes)}
    return _page(request, _local_source_ref(root, path), "", extra)


@require_GET
@role_required(Role.VIEWER)
def gguf_hub_model(request: HttpRequest, org: str, name: str) -> HttpResponse:
    repo_id, revision = f"{org}/{name}", request.GET.get("revision", "")
    picked = request.GET.get("file", "")
    try:
        check_hub_id(repo_id)
        hub = gsel.gguf_hub(request.session)
        rows, choice = gsel.hub_choice_rows(hub, repo_id, revision or "main", picked)
    except ModelSourceError as exc:
        return render(request, "catalog/error.html", {"message": str(exc)}, status=404)
    except HubError as exc:
        failed = {"message": exc.message, "repo_id": repo_id}
        return render(request, "catalog/error.html", failed, status=hub_status(exc))
    extra: dict[str, Any] = {"repo_id": repo_id, "choices": rows, "choice": choice}
    if choice is None:
        # the repo's files first: the user picks one quantization, then it is planned
        context = {"ref": repo_id, "plan": None, "arch": [], "picking": True, **extra}
        return render(request, "catalog/gguf_detail.html", context)
    extra["size"] = human_bytes(choice.size_bytes)
    return _page(request, f"{repo_id}:{choice.first}", revision, extra)


def _bad(message: str, status: int = 400) -> JsonResponse:
    return JsonResponse({"ok": False, "error": message, "plan": None}, status=status)


@require_GET
@role_required(Role.VIEWER)
def gguf_plan_api(request: HttpRequest) -> JsonResponse:
    """The GGUF panel's JSON: 200 when the chosen plan fits, 422 when it does not."""
    form = GgufPlanForm(request.GET)
    if not form.is_valid():
        return _bad(form.first_error())
    try:
        payload, fits = form.plan(request.session, request.GET.getlist("hosts"))
    except HubError as exc:
        return _bad(exc.message, hub_status(exc))
    except (ModelSourceError, planning.PlanningError) as exc:
        return _bad(str(exc))
    response = JsonResponse(payload, status=200 if fits else 422)
    response["Server-Timing"] = f"plan;dur={payload['server_ms']}"
    return response
