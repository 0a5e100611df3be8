"""The launch form and the service under hostile input: names that would be engine flags, absurd
numbers, generated junk (hypothesis). A clear message naming the field; never a 500, never a
traceback, never a deployment that should not exist. The launches here never reach a worker:
the `db` fixture's transaction is rolled back before any on-commit task is sent."""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from deployments.catalog.plan_panel import default_name
from deployments.catalog.sources import ModelSource
from deployments.lifecycle.forms import LaunchForm
from deployments.lifecycle.limits import name_problem
from deployments.lifecycle.services import DeploymentError, LaunchRequest, deployment_create
from deployments.models import Deployment, GpuLease
from monitoring.models import Gpu, Host
from tests.support.hubstub import HubStub

HOST = "hostile-sim"
GIB = 1 << 30
VALID = {
    "name": "tiny-one",
    "model_ref": "local:0/tiny",
    "host": HOST,
    "engine": "transformers",
    "dtype": "auto",
    "kv_cache_dtype": "auto",
}
TRACEBACK_MARKERS = ("Traceback", 'File "', "site-packages")


@pytest.fixture
def sim_host(db: None) -> Host:
    host = Host.objects.create(
        name=HOST,
        queue=f"host.{HOST}",
        backend="simulated",
        simulated=True,
        last_heartbeat=timezone.now(),
    )
    Gpu.objects.create(
        host=host, index=0, uuid="GPU-hostile-0", name="sim", memory_total_bytes=80 * GIB
    )
    return host


@pytest.mark.parametrize(
    "name", ["--enforce-eager", "-x", "a_b", "a b", "ünï", "a/b", "x" * 64, "", "-"]
)
def test_form_refuses_names_that_are_not_plain(sim_host: Host, name: str) -> None:
    form = LaunchForm({**VALID, "name": name})
    assert not form.is_valid()
    assert list(form.errors) == ["name"]


def test_form_names_the_rule(sim_host: Host) -> None:
    form = LaunchForm({**VALID, "name": "--enforce-eager"})
    assert not form.is_valid()
    assert form.errors["name"] == [
        "Name '--enforce-eager' is refused: use 1 to 63 lowercase letters, digits and dashes, "
        "starting with a letter or a digit."
    ]


@pytest.mark.parametrize("name", ["tiny", "Tiny-2", "7b", "a-", "x" * 63])
def test_form_takes_plain_names_lowercased(sim_host: Host, name: str) -> None:
    form = LaunchForm({**VALID, "name": name})
    assert form.is_valid(), form.errors
    assert form.cleaned_data["name"] == name.lower()


def test_service_refuses_a_flag_as_a_name(sim_host: Host, operator: Any) -> None:
    request = LaunchRequest(name="--enforce-eager", model_ref="local:0/tiny", host_name=HOST)
    with pytest.raises(DeploymentError, match=r"Name '--enforce-eager' is refused"):
        deployment_create(user=operator, request=request)
    assert not Deployment.objects.exists()


def test_max_num_seqs_has_an_upper_bound(sim_host: Host) -> None:
    form = LaunchForm({**VALID, "max_num_seqs": "4097"})
    assert not form.is_valid()
    assert form.errors["max_num_seqs"] == ["Ensure this value is less than or equal to 4096."]
    assert LaunchForm({**VALID, "max_num_seqs": "4096"}).is_valid()


def test_the_page_shows_the_message_by_the_field(
    client: Client, operator: Any, sim_host: Host
) -> None:
    client.force_login(operator)
    response = client.post("/deployments/new/", {**VALID, "name": "--enforce-eager"})
    assert response.status_code == 200
    html = response.content.decode()
    label = re.search(r"<label>Name .*?</label>", html, re.S)
    assert label and "is refused: use 1 to 63 lowercase letters" in label[0]
    assert not Deployment.objects.exists()


# --- generated launch forms ----------------------------------------------------------------

HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=string.printable, max_size=400),
    st.sampled_from(["", " ", "-1", "0", "1e309", "NaN", "9" * 400, "--enforce-eager", "\x00"]),
)
HOSTILE_NUMBER = st.one_of(st.integers(min_value=-(2**70), max_value=2**70).map(str), HOSTILE_TEXT)
FIELDS: dict[str, st.SearchStrategy[str]] = {
    "name": HOSTILE_TEXT,
    "model_ref": st.one_of(HOSTILE_TEXT, st.sampled_from(["a b/c", "-x/y", "local:9/x"])),
    "revision": HOSTILE_TEXT,
    "host": HOSTILE_TEXT,
    "engine": HOSTILE_TEXT,
    "tensor_parallel_size": HOSTILE_NUMBER,
    "pipeline_parallel_size": HOSTILE_NUMBER,
    "max_model_len": HOSTILE_NUMBER,
    "max_num_seqs": HOSTILE_NUMBER,
    "dtype": HOSTILE_TEXT,
    "quantization": HOSTILE_TEXT,
    "kv_cache_dtype": HOSTILE_TEXT,
    "gpu_memory_utilization": HOSTILE_NUMBER,
    "auto_restart": HOSTILE_TEXT,
}
# A refusal by the service (after the form) speaks of what the field is about.
SERVICE_WORDS = {
    "model_ref": ("model", "hub id", "local", "config"),
    "revision": ("revision",),
    "max_model_len": ("max_model_len", "max model len", "context"),
    "quantization": ("quantization",),
}


def _names(field: str, value: str, text: str) -> bool:
    lowered = text.lower()
    words = (field.replace("_", " "), field, *SERVICE_WORDS.get(field, ()))
    return any(w in lowered for w in words) or (len(value.strip()) > 1 and value.strip() in text)


@settings(
    max_examples=60,
    deadline=3000,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(field=st.sampled_from(sorted(FIELDS)), data=st.data())
def test_generated_launch_forms_answer_a_message_naming_the_field(
    client: Client,
    operator: Any,
    sim_host: Host,
    model_root: Path,
    hub: HubStub,
    field: str,
    data: st.DataObject,
) -> None:
    value = data.draw(FIELDS[field], label=field)
    client.force_login(operator)
    before = Deployment.objects.count()
    response = client.post("/deployments/new/", {**VALID, field: value})
    assert response.status_code in (200, 302), response.status_code
    text = response.content.decode(errors="replace")
    assert not any(marker in text for marker in TRACEBACK_MARKERS), text[:500]
    event(f"status {response.status_code}")
    if response.status_code == 302:  # launched: the value was acceptable
        GpuLease.objects.all().delete()  # the next example launches on a free GPU again
        Deployment.objects.all().delete()
        return
    assert Deployment.objects.count() == before
    form_errors = response.context["form"].errors
    event("refused by the form" if form_errors else "refused by the service")
    if form_errors:
        assert list(form_errors) == [field], form_errors
        return
    said = " ".join(str(m) for m in get_messages(response.wsgi_request))
    assert said and _names(field, value, said), (field, value, said)


@settings(max_examples=200, deadline=None)
@given(tail=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,60}[A-Za-z0-9]", fullmatch=True))
def test_the_detail_pages_default_name_is_a_valid_name(tail: str) -> None:
    source = ModelSource(f"org/{tail}", f"org/{tail}", "", False)
    assert name_problem(default_name(source)) is None, default_name(source)
