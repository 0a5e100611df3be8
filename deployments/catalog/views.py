"""The Models catalog, model detail pages and the plan panel's JSON endpoint."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import Role, role_required
from deployments import planning
from deployments.catalog import cache_services, commands, gguf_selectors
from deployments.catalog import plan_panel as panel
from deployments.catalog import plan_targets as targets
from deployments.catalog import selectors as sel
from deployments.catalog.adapters import list_local_adapters
from deployments.catalog.corrections import fleet_corrections
from deployments.catalog.hub import HubError, HubGatedError, HubUnavailableError
from deployments.catalog.hub.cards import SORTS
from deployments.catalog.sources import ModelSource, ModelSourceError, resolve_source

SORT_LABELS = {"downloads": "Downloads", "likes": "Likes", "trending": "Trending"}
SORT_LABELS |= {"updated": "Recently updated"}
QUANT_CHOICES = [("any", "Any"), ("none", "None"), ("awq", "AWQ"), ("gptq", "GPTQ")]
QUANT_CHOICES += [("fp8", "FP8")]
DTYPES = ("auto", "bfloat16", "float16", "float32")
KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
BILLION = 10**9
MAX_NUM_SEQS = 4096  # as the launch form (lifecycle.limits); catalog does not import lifecycle


class SearchForm(forms.Form):
    q = forms.CharField(required=False, max_length=200)
    sort = forms.ChoiceField(required=False, choices=[(s, SORT_LABELS[s]) for s in SORTS])
    min_b = forms.FloatField(required=False, min_value=0, label="Min params (B)")
    max_b = forms.FloatField(required=False, min_value=0, label="Max params (B)")
    quantization = forms.ChoiceField(required=False, choices=QUANT_CHOICES)
    license = forms.CharField(required=False, max_length=60)
    gated = forms.ChoiceField(
        required=False, choices=[("", "Any"), ("no", "Open"), ("yes", "Gated")]
    )
    page = forms.IntegerField(required=False, min_value=1, max_value=50)

    def filters(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "query": data["q"],
            "sort": data["sort"] or "downloads",
            "min_params": _params(data["min_b"]),
            "max_params": _params(data["max_b"]),
            "quantization": data["quantization"] or "any",
            "license": data["license"].strip() or None,
            "gated": {"yes": True, "no": False}.get(data["gated"]),
            "page": data["page"] or 1,
        }


def _replicas(text: str) -> int | None:
    """A number of replicas; blank or ``max``: as many as fit (None)."""
    text = text.strip()
    return None if text in ("", "max") else int(text)


def _params(billions: float | None) -> int | None:
    return None if billions is None else round(billions * BILLION)


class PlanForm(forms.Form):
    ref = forms.CharField(max_length=300)
    revision = forms.CharField(required=False, max_length=100)
    target = forms.CharField(required=False, max_length=100)
    gpus = forms.CharField(required=False, max_length=60)
    max_model_len = forms.IntegerField(required=False, min_value=1)
    max_num_seqs = forms.IntegerField(required=False, min_value=1, max_value=MAX_NUM_SEQS)
    concurrency = forms.IntegerField(required=False, min_value=1, max_value=100_000)
    goal = forms.ChoiceField(required=False, choices=[(g, g) for g in planning.GOALS])
    replicas = forms.RegexField(
        required=False,
        max_length=6,
        regex=r"^\s*(max|[1-9][0-9]{0,3})\s*$",
        error_messages={"invalid": "enter a whole number of replicas, or max"},
    )
    placement = forms.ChoiceField(required=False, choices=[(p, p) for p in planning.PLACEMENTS])
    dtype = forms.ChoiceField(required=False, choices=[(d, d) for d in DTYPES])
    quantization = forms.CharField(required=False, max_length=40)
    kv_cache_dtype = forms.ChoiceField(required=False, choices=[(d, d) for d in KV_DTYPES])
    gpu_memory_utilization = forms.FloatField(required=False, min_value=0.05, max_value=1.0)
    tensor_parallel_size = forms.IntegerField(required=False, min_value=1, max_value=64)
    pipeline_parallel_size = forms.IntegerField(required=False, min_value=1, max_value=64)
    # "off": this plan without the correction learned from the fleet's starts (corrections.py)
    learned_correction = forms.ChoiceField(required=False, choices=[("on", "on"), ("off", "off")])
    # "cpu": vLLM's CPU build on the hosts' CPUs; its KV space per rank (blank: from free RAM)
    device = forms.ChoiceField(required=False, choices=[(d, d) for d in planning.DEVICES])
    kv_cache_bytes = forms.IntegerField(required=False, min_value=1, max_value=1 << 46)

    def plan_request(self, source: ModelSource) -> planning.PlanRequest:
        data = self.cleaned_data
        return planning.PlanRequest(
            model=source.engine_model,
            revision=source.revision or "",
            tensor_parallel_size=data["tensor_parallel_size"],
            pipeline_parallel_size=data["pipeline_parallel_size"],
            dtype=data["dtype"] or "auto",
            quantization=data["quantization"].strip() or None,
            kv_cache_dtype=data["kv_cache_dtype"] or "auto",
            max_model_len=data["max_model_len"],
            max_num_seqs=data["max_num_seqs"],
            gpu_memory_utilization=data["gpu_memory_utilization"],
            concurrency=data["concurrency"],
            goal=data["goal"] or "balanced",
            replicas=_replicas(data["replicas"]),
            placement=data["placement"] or "spread",
            corrections=fleet_corrections(),
            learned_correction=data["learned_correction"] != "off",
            device=data["device"] or "gpu",
            kv_cache_bytes=data["kv_cache_bytes"] if data["device"] == "cpu" else None,
        )

    def plan(self, session: Any, hosts: Sequence[str] = ()) -> tuple[dict[str, Any], bool]:
        """The plan panel's answer for this valid form, and whether it fits; raises HubError,
        ModelSourceError or PlanningError when it cannot plan (the page's JSON and the API
        answer those alike). ``hosts``: the hosts a "picked hosts" target plans over."""
        data = self.cleaned_data
        source = resolve_source(data["ref"], data["revision"])
        spec = sel.model_spec(source, sel.client_for(session))
        target = targets.plan_target(data["target"], data["gpus"], list(hosts))
        return panel.plan_panel(source, spec, target, self.plan_request(source))

    def first_error(self) -> str:
        field, errors = next(iter(self.errors.items()))
        return str(errors[0]) if field == "__all__" else f"{field.replace('_', ' ')}: {errors[0]}"


def hub_status(error: HubError) -> int:
    if isinstance(error, HubGatedError) or error.code == "unauthorized":
        return 403
    if error.code == "rate_limited":
        return 429
    if isinstance(error, HubUnavailableError):
        return 503
    return 404 if "not_found" in error.code else 502


# -- catalog ----------------------------------------------------------------------------------


def _search_context(request: HttpRequest) -> dict[str, Any]:
    form = SearchForm(request.GET)
    context: dict[str, Any] = {"form": form, "page": None, "cards": [], "hub_error": None}
    if not form.is_valid():
        context["hub_error"] = "Check the filters: " + "; ".join(
            f"{name}: {errs[0]}" for name, errs in form.errors.items()
        )
        return context
    filters = form.filters()
    try:
        page = sel.search_models(sel.client_for(request.session), filters)
    except HubError as exc:
        context["hub_error"] = exc.message
        return context
    where = cache_services.hosts_holding([s.repo_id for s in page.items])
    cards = [sel.hub_card(s, where.get(s.repo_id, ())) for s in page.items]
    context.update(page=page, cards=cards)
    context.update(prev_query=_page_query(request, page.page - 1))
    context.update(next_query=_page_query(request, page.page + 1))
    return context


def _page_query(request: HttpRequest, page: int) -> str:
    query = request.GET.copy()
    query["page"] = str(page)
    return query.urlencode()


@require_GET
@role_required(Role.VIEWER)
def models_index(request: HttpRequest) -> HttpResponse:
    context = _search_context(request)
    context["local_cards"] = sel.local_models() + gguf_selectors.local_gguf_cards()
    context["local_adapters"] = list_local_adapters()
    context["has_token"] = bool(request.session.get(sel.SESSION_TOKEN_KEY))
    return render(request, "catalog/index.html", context)


@require_GET
@role_required(Role.VIEWER)
def models_results(request: HttpRequest) -> HttpResponse:
    return render(request, "catalog/_results.html", _search_context(request))


@require_POST
@role_required(Role.VIEWER)
def hub_token(request: HttpRequest) -> HttpResponse:
    token = request.POST.get("token", "").strip()
    if request.POST.get("action") == "clear" or not token:
        sel.keep_session_hub_token(request.session, None)
        messages.success(request, "Your Hub token is forgotten; the server's token is used.")
    elif len(token) > 200 or not token.isprintable() or any(c.isspace() for c in token):
        messages.error(request, "That does not look like a Hub token (no spaces, ≤ 200 chars).")
    else:
        sel.keep_session_hub_token(request.session, token)
        messages.success(request, "Hub token kept in your session, encrypted, until you log out.")
    return redirect("models")


# -- model detail -----------------------------------------------------------------------------


def _detail(
    request: HttpRequest, source: ModelSource, extra: dict[str, Any], status: int = 200
) -> HttpResponse:
    client = sel.client_for(request.session)
    context: dict[str, Any] = {"source": source, "arch": [], "plan": None, **extra}
    try:
        spec = sel.model_spec(source, client)
    except (HubError, ModelSourceError) as exc:
        context["spec_error"] = getattr(exc, "message", str(exc))
        # a GGUF-only repo has no config.json: llama.cpp serves it, planned from its files
        context["gguf_url"] = "" if source.is_local else f"/models/gguf/{source.ref}/"
        return render(request, "catalog/detail.html", context, status=status)
    hosts = targets.host_choices()
    target = targets.default_target(hosts)
    request_ = planning.PlanRequest(model=source.engine_model, revision=source.revision or "")
    plan, fits = panel.plan_panel(source, spec, target, request_)
    if not fits and sum(c.online for c in hosts) > 1:
        # too large for the best host alone: offer the plan over every online host instead
        fleet = targets.plan_target(targets.FLEET, "")
        fleet_plan, fleet_fits = panel.plan_panel(source, spec, fleet, request_)
        if fleet_fits:
            target, plan = fleet, fleet_plan
    context.update(arch=sel.architecture_rows(spec), plan=plan, hosts=hosts, target=target)
    context.update(fleet_label=targets.fleet_label(hosts), any_online=any(c.online for c in hosts))
    context.update(dtypes=DTYPES, kv_dtypes=KV_DTYPES, default_whatif=targets.DEFAULT_WHATIF)
    context.update(max_len=spec.derived_max_model_len, commands=commands.command_blocks(plan))
    context.update(default_name=panel.default_name(source))
    return render(request, "catalog/detail.html", context, status=status)


@require_GET
@role_required(Role.VIEWER)
def hub_model(request: HttpRequest, org: str, name: str) -> HttpResponse:
    revision = request.GET.get("revision", "")
    try:
        source = resolve_source(f"{org}/{name}", revision)
        card = sel.client_for(request.session).model_info(source.ref, revision or None)
    except ModelSourceError as exc:
        return render(request, "catalog/error.html", {"message": str(exc)}, status=400)
    except HubError as exc:
        context = {"message": exc.message, "repo_id": f"{org}/{name}"}
        return render(request, "catalog/error.html", context, status=hub_status(exc))
    extra = {"card": card, "weights": sel.human_bytes(card.weights_bytes)}
    extra["checkpoint_quant"] = card.quantization
    extra["parameters"] = sel.human_params(card.parameters)
    extra["on_hosts"] = cache_services.on_hosts(card.repo_id)
    return _detail(request, source, extra)


@require_GET
@role_required(Role.VIEWER)
def local_model(request: HttpRequest, root: int, path: str = ".") -> HttpResponse:
    try:
        source = sel.local_source(root, path)
    except ModelSourceError as exc:
        return render(request, "catalog/error.html", {"message": str(exc)}, status=404)
    model = sel.local_model(source)
    extra = {"local": model, "weights": sel.human_bytes(model.size_bytes if model else None)}
    extra["parameters"] = sel.human_params(model.parameters if model else None)
    extra["checkpoint_quant"] = model.quantization if model else None
    return _detail(request, source, extra)


# -- plan endpoint ----------------------------------------------------------------------------


def _bad(message: str, status: int = 400) -> JsonResponse:
    return JsonResponse({"ok": False, "error": message, "plan": None}, status=status)


@require_GET
@role_required(Role.VIEWER)
def plan_api(request: HttpRequest) -> JsonResponse:
    started = time.perf_counter()
    form = PlanForm(request.GET)
    if not form.is_valid():
        return _bad(form.first_error())
    try:
        payload, fits = form.plan(request.session, request.GET.getlist("hosts"))
    except HubError as exc:
        return _bad(exc.message, hub_status(exc))
    except (ModelSourceError, planning.PlanningError) as exc:
        return _bad(str(exc))
    response = JsonResponse(payload, status=200 if fits else 422)
    view_ms = (time.perf_counter() - started) * 1000
    response["Server-Timing"] = f"plan;dur={payload['server_ms']}, view;dur={view_ms:.2f}"
    return response
